"""LLM.chat and the tokenizer's apply_chat_template: the model's chat template (or one given)
rendered as the server's chat endpoint renders it, the rendered text encoded without special
tokens, and the reply equal to generating from those tokens."""

import pytest

from quantserve import LLM, SamplingParams

from conftest import MODEL_DIR, THREADS, set_chat_template

# stories260K has no chat template; this one writes each message as "role: content" lines.
TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
CONVERSATION = [{"role": "user", "content": "Tell me a story"}]
GREEDY = SamplingParams(temperature=0, max_tokens=16)


@pytest.fixture
def chat_llm(model_copy):
    set_chat_template(model_copy, TEMPLATE)
    return LLM(str(model_copy), threads=THREADS)


def test_chat_renders_the_models_template(chat_llm):
    out = chat_llm.chat(CONVERSATION, GREEDY, use_tqdm=False)
    assert len(out) == 1
    assert out[0].prompt == "user: Tell me a story\nassistant:"
    tokenizer = chat_llm.get_tokenizer()
    assert out[0].prompt_token_ids == tokenizer.encode(out[0].prompt, add_special_tokens=False)
    direct = chat_llm.generate({"prompt_token_ids": out[0].prompt_token_ids}, GREEDY,
                               use_tqdm=False)
    assert out[0].outputs[0].token_ids == direct[0].outputs[0].token_ids
    assert out[0].outputs[0].text == direct[0].outputs[0].text


def test_chat_over_several_conversations(chat_llm):
    conversations = [CONVERSATION,
                     [{"role": "system", "content": "Be brief"},
                      {"role": "user", "content": [{"type": "text", "text": "Hello"}]}]]
    out = chat_llm.chat(conversations, GREEDY, use_tqdm=False)
    assert [o.prompt for o in out] == ["user: Tell me a story\nassistant:",
                                       "system: Be brief\nuser: Hello\nassistant:"]
    no_prompt = chat_llm.chat(CONVERSATION, GREEDY, use_tqdm=False,
                              add_generation_prompt=False)
    assert no_prompt[0].prompt == "user: Tell me a story\n"


def test_chat_with_a_given_template(llm, tmp_path):
    out = llm.chat(CONVERSATION, GREEDY, use_tqdm=False,
                   chat_template="{{ messages[0]['content'] | upper }}")
    assert out[0].prompt == "TELL ME A STORY"
    path = tmp_path / "t.jinja"
    path.write_text("[{{ messages | length }}]{{ extra }}")
    out = llm.chat(CONVERSATION, GREEDY, use_tqdm=False, chat_template=str(path),
                   chat_template_kwargs={"extra": "!"})
    assert out[0].prompt == "[1]!"


def test_chat_without_a_template_is_an_error(llm):
    with pytest.raises(ValueError, match="chat template"):
        llm.chat(CONVERSATION, GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="text parts only"):
        llm.chat([{"role": "user", "content": [{"type": "image_url",
                                                 "image_url": {"url": "file:///x.png"}}]}],
                 chat_template=TEMPLATE, use_tqdm=False)
    with pytest.raises(ValueError):
        llm.chat([], chat_template=TEMPLATE, use_tqdm=False)


def test_tokenizer(chat_llm):
    tok = chat_llm.get_tokenizer()
    ids = tok.encode("Once upon a time")
    assert ids[0] == tok.bos_token_id == 1
    assert tok.eos_token_id == 2 and tok.eos_token == "</s>" and tok.bos_token == "<s>"
    assert tok.decode(ids, skip_special_tokens=True) == "Once upon a time"
    assert tok.decode(ids).startswith("<s>")
    assert tok.encode("Once upon a time", add_special_tokens=False) == ids[1:]
    assert len(tok) == tok.vocab_size == 512
    assert tok.convert_ids_to_tokens(ids[1:3]) == [tok.convert_ids_to_tokens(i)
                                                   for i in ids[1:3]]
    text = tok.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    assert text == "user: Tell me a story\nassistant:"
    assert tok.apply_chat_template(CONVERSATION, add_generation_prompt=True) == \
        tok.encode(text, add_special_tokens=False)
    assert tok.apply_chat_template(CONVERSATION, tokenize=False) == "user: Tell me a story\n"
