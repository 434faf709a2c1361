// io: torch.save zip + state_dict pickle reader (see pth_reader.h). The zip is read through its
// central directory; the pickle opcodes are those of protocol 2 that torch.save emits for a
// state_dict (pickletools lists them for a real file: PROTO, GLOBAL, EMPTY_DICT, EMPTY_TUPLE,
// MARK, TUPLE/TUPLE1-3, BINUNICODE, BININT/BININT1/BININT2, NEWTRUE/NEWFALSE, NONE,
// BINPERSID, REDUCE, BUILD, SETITEM(S), (LONG_)BINPUT/BINGET, STOP).
#include "io/pth_reader.h"

#include <cstring>
#include <map>
#include <memory>

#include "core/mmap_file.h"

namespace qs::io {

namespace {

uint32_t u16(const uint8_t* p) {
  return p[0] | (p[1] << 8);
}
uint32_t u32(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

struct ZipEntry {
  size_t offset = 0, size = 0;
};

Result<std::map<std::string, ZipEntry>> read_zip(const MappedFile& f) {
  const uint8_t* d = f.data();
  const size_t n = f.size();
  const std::string& where = f.path();
  if (n < 22) return data_loss(where + ": too small to be a zip file");
  size_t eocd = n - 22;
  for (;; --eocd) {  // the end record sits before a comment of at most 64 KiB
    if (u32(d + eocd) == 0x06054b50) break;
    if (eocd == 0 || n - eocd > 22 + 65535) return data_loss(where + ": not a zip file");
  }
  const size_t count = u16(d + eocd + 10), cd_size = u32(d + eocd + 12), cd = u32(d + eocd + 16);
  if (cd > n || cd_size > n - cd) return data_loss(where + ": central directory out of range");
  std::map<std::string, ZipEntry> out;
  size_t p = cd;
  for (size_t i = 0; i < count; ++i) {
    if (p + 46 > cd + cd_size || u32(d + p) != 0x02014b50) {
      return data_loss(where + ": bad central directory entry");
    }
    const uint32_t method = u16(d + p + 10), csize = u32(d + p + 20), usize = u32(d + p + 24);
    const uint32_t name_len = u16(d + p + 28), extra = u16(d + p + 30), comment = u16(d + p + 32);
    const size_t local = u32(d + p + 42);  // size_t: local + 30 must not wrap in 32 bits
    if (p + 46 + name_len > cd + cd_size) return data_loss(where + ": entry name out of range");
    const std::string name(reinterpret_cast<const char*>(d + p + 46), name_len);
    if (method != 0 || csize != usize) {
      return unimplemented(where + ": zip entry '" + name + "' is compressed (torch.save stores)");
    }
    if (csize == 0xffffffffu || local == 0xffffffffu) {
      return unimplemented(where + ": zip64 entries are not supported");
    }
    if (local > n || n - local < 30 || u32(d + local) != 0x04034b50) {
      return data_loss(where + ": bad local header of '" + name + "'");
    }
    const size_t data = local + 30 + u16(d + local + 26) + u16(d + local + 28);
    if (data > n || csize > n - data) return data_loss(where + ": '" + name + "' out of range");
    out[name] = {data, csize};
    p += 46 + name_len + extra + comment;
  }
  return out;
}

// Objects live in an arena owned by the reader: the memo lets a pickle make a dict that holds
// itself, which reference counting would leak.
struct Obj;
using P = Obj*;
struct Obj {
  enum Kind { kNone, kBool, kInt, kStr, kTuple, kDict, kGlobal, kStorage, kTensor, kMark } kind;
  int64_t i = 0;
  std::string s, s2;                  // str; global module/name; storage key/type
  std::vector<P> items;               // tuple
  std::vector<std::pair<P, P>> dict;  // dict
  Tensor tensor;
};

}  // namespace

Result<std::vector<std::pair<std::string, Tensor>>> read_pth_state_dict(const std::string& path) {
  QS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  QS_ASSIGN_OR_RETURN(auto entries, read_zip(*file));
  std::string prefix;
  for (const auto& [name, e] : entries) {
    const size_t at = name.rfind("/data.pkl");
    if (at != std::string::npos && at + 9 == name.size()) prefix = name.substr(0, at);
  }
  auto pkl_it = entries.find(prefix + "/data.pkl");
  if (pkl_it == entries.end()) return data_loss(path + ": no data.pkl (not a torch.save file)");
  const uint8_t* pk = file->data() + pkl_it->second.offset;
  const size_t pn = pkl_it->second.size;
  const std::string where = path + ": data.pkl";
  // A state_dict's pickle is ~150 bytes per tensor; this bounds the objects a file can make.
  if (pn > (size_t{64} << 20)) return data_loss(where + ": larger than 64 MiB");

  // Each opcode makes at most one object; a state_dict makes ~10 per tensor, so this bound is
  // far above any real file and keeps a hostile one from exhausting memory one byte at a time.
  constexpr size_t kMaxObjects = size_t{1} << 22;
  std::vector<std::unique_ptr<Obj>> arena;
  auto make = [&](Obj::Kind k) {
    arena.push_back(std::make_unique<Obj>());
    arena.back()->kind = k;
    return arena.back().get();
  };
  std::vector<P> stack;
  std::map<uint32_t, P> memo;
  auto pop = [&]() -> Result<P> {
    if (stack.empty()) return data_loss(where + ": stack underflow");
    P v = stack.back();
    stack.pop_back();
    return v;
  };
  auto pop_mark = [&]() -> Result<std::vector<P>> {
    size_t m = stack.size();
    while (m > 0 && stack[m - 1]->kind != Obj::kMark) --m;
    if (m == 0) return data_loss(where + ": MARK missing");
    std::vector<P> items(stack.begin() + m, stack.end());
    stack.resize(m - 1);
    return items;
  };
  auto need = [&](size_t pos, size_t len) -> Status {
    return pos + len <= pn ? ok_status() : data_loss(where + ": truncated");
  };
  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
  size_t copied = 0;
  auto rebuild = [&](const std::vector<P>& a) -> Result<P> {
    if (a.size() < 4 || a[0]->kind != Obj::kStorage || a[1]->kind != Obj::kInt ||
        a[2]->kind != Obj::kTuple || a[3]->kind != Obj::kTuple) {
      return data_loss(where + ": unexpected _rebuild_tensor_v2 arguments");
    }
    DType dt;
    if (a[0]->s2 == "HalfStorage") {
      dt = DType::kF16;
    } else if (a[0]->s2 == "FloatStorage") {
      dt = DType::kF32;
    } else if (a[0]->s2 == "BFloat16Storage") {
      dt = DType::kBF16;
    } else {
      return unimplemented(where + ": storage type " + a[0]->s2);
    }
    std::vector<int64_t> shape;
    int64_t numel = 1, expect = 1;
    for (const P& v : a[2]->items) {
      // Sizes a real state_dict can hold; also keeps the products below from overflowing.
      if (v->kind != Obj::kInt || v->i < 0 || v->i > (int64_t{1} << 32) ||
          (v->i > 0 && numel > (int64_t{1} << 40) / v->i)) {
        return data_loss(where + ": bad tensor size");
      }
      shape.push_back(v->i);
      numel *= v->i;
    }
    if (a[3]->items.size() != shape.size() || shape.size() > 8) {
      return data_loss(where + ": stride rank mismatch");
    }
    for (size_t k = shape.size(); k-- > 0;) {
      if (a[3]->items[k]->kind != Obj::kInt) return data_loss(where + ": bad tensor stride");
      if (shape[k] > 1 && a[3]->items[k]->i != expect) {
        return unimplemented(where + ": a non-contiguous tensor");
      }
      expect *= shape[k];
    }
    auto it = entries.find(prefix + "/data/" + a[0]->s);
    if (it == entries.end()) return data_loss(path + ": storage '" + a[0]->s + "' missing");
    const size_t es = dtype_size(dt);
    const size_t off = static_cast<size_t>(a[1]->i) * es, bytes = static_cast<size_t>(numel) * es;
    if (a[1]->i < 0 || off > it->second.size || bytes > it->second.size - off) {
      return data_loss(path + ": tensor out of its storage '" + a[0]->s + "'");
    }
    // Tensors may share a storage (tied weights), but a pickle that rebuilds one view over and
    // over would copy the file many times over.
    copied += bytes;
    if (copied > 4 * file->size()) return data_loss(where + ": tensors copy the file 4 times over");
    P t = make(Obj::kTensor);
    t->tensor = Tensor::zeros(dt, shape);
    std::memcpy(t->tensor.mutable_ptr<uint8_t>(), file->data() + it->second.offset + off, bytes);
    return t;
  };

  size_t pos = 0;
  while (true) {
    QS_RETURN_IF_ERROR(need(pos, 1));
    if (arena.size() >= kMaxObjects) return data_loss(where + ": more than 4M pickle objects");
    const uint8_t op = pk[pos++];
    switch (op) {
      case 0x80:  // PROTO
        QS_RETURN_IF_ERROR(need(pos, 1));
        ++pos;
        break;
      case 'c': {  // GLOBAL module\nname\n
        const void* nl1 = std::memchr(pk + pos, '\n', pn - pos);
        if (!nl1) return data_loss(where + ": bad GLOBAL");
        const size_t e1 = static_cast<const uint8_t*>(nl1) - pk;
        const void* nl2 = std::memchr(pk + e1 + 1, '\n', pn - e1 - 1);
        if (!nl2) return data_loss(where + ": bad GLOBAL");
        const size_t e2 = static_cast<const uint8_t*>(nl2) - pk;
        P g = make(Obj::kGlobal);
        g->s.assign(reinterpret_cast<const char*>(pk + pos), e1 - pos);
        g->s2.assign(reinterpret_cast<const char*>(pk + e1 + 1), e2 - e1 - 1);
        const std::string full = g->s + "." + g->s2;
        if (full != "collections.OrderedDict" && full != "torch._utils._rebuild_tensor_v2" &&
            !(g->s == "torch" && g->s2.size() > 7 &&
              g->s2.compare(g->s2.size() - 7, 7, "Storage") == 0)) {
          return unimplemented(where + ": global " + full + " (only a plain state_dict)");
        }
        stack.push_back(g);
        pos = e2 + 1;
        break;
      }
      case '}':
        stack.push_back(make(Obj::kDict));
        break;
      case ')':
        stack.push_back(make(Obj::kTuple));
        break;
      case '(':
        stack.push_back(make(Obj::kMark));
        break;
      case 't': {
        QS_ASSIGN_OR_RETURN(auto items, pop_mark());
        P t = make(Obj::kTuple);
        t->items = std::move(items);
        stack.push_back(t);
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {
        P t = make(Obj::kTuple);
        for (int k = 0; k < op - 0x84; ++k) {
          QS_ASSIGN_OR_RETURN(P v, pop());
          t->items.insert(t->items.begin(), v);
        }
        stack.push_back(t);
        break;
      }
      case 'X': {
        QS_RETURN_IF_ERROR(need(pos, 4));
        const uint32_t len = u32(pk + pos);
        pos += 4;
        QS_RETURN_IF_ERROR(need(pos, len));
        P s = make(Obj::kStr);
        s->s.assign(reinterpret_cast<const char*>(pk + pos), len);
        pos += len;
        stack.push_back(s);
        break;
      }
      case 'K':
      case 'M':
      case 'J': {
        const size_t len = op == 'K' ? 1 : op == 'M' ? 2 : 4;
        QS_RETURN_IF_ERROR(need(pos, len));
        P v = make(Obj::kInt);
        v->i = op == 'K'   ? pk[pos]
               : op == 'M' ? u16(pk + pos)
                           : static_cast<int32_t>(u32(pk + pos));
        pos += len;
        stack.push_back(v);
        break;
      }
      case 0x88:
      case 0x89: {
        P v = make(Obj::kBool);
        v->i = op == 0x88;
        stack.push_back(v);
        break;
      }
      case 'N':
        stack.push_back(make(Obj::kNone));
        break;
      case 'Q': {  // BINPERSID: ('storage', StorageType, key, location, numel)
        QS_ASSIGN_OR_RETURN(P pid, pop());
        if (pid->kind != Obj::kTuple || pid->items.size() < 5 || pid->items[0]->kind != Obj::kStr ||
            pid->items[0]->s != "storage" || pid->items[1]->kind != Obj::kGlobal ||
            pid->items[2]->kind != Obj::kStr) {
          return data_loss(where + ": unexpected persistent id");
        }
        P st = make(Obj::kStorage);
        st->s = pid->items[2]->s;
        st->s2 = pid->items[1]->s2;
        stack.push_back(st);
        break;
      }
      case 'R': {  // REDUCE
        QS_ASSIGN_OR_RETURN(P args, pop());
        QS_ASSIGN_OR_RETURN(P fn, pop());
        if (fn->kind != Obj::kGlobal || args->kind != Obj::kTuple) {
          return data_loss(where + ": REDUCE of a non-global");
        }
        if (fn->s2 == "OrderedDict") {
          stack.push_back(make(Obj::kDict));
        } else if (fn->s2 == "_rebuild_tensor_v2") {
          QS_ASSIGN_OR_RETURN(P t, rebuild(args->items));
          stack.push_back(t);
        } else {
          return unimplemented(where + ": call of " + fn->s + "." + fn->s2);
        }
        break;
      }
      case 'b': {  // BUILD: the state (the OrderedDict's _metadata) is not needed
        QS_ASSIGN_OR_RETURN(P state, pop());
        (void)state;
        break;
      }
      case 's':
      case 'u': {
        std::vector<P> kv;
        if (op == 's') {
          QS_ASSIGN_OR_RETURN(P v, pop());
          QS_ASSIGN_OR_RETURN(P k, pop());
          kv = {k, v};
        } else {
          QS_ASSIGN_OR_RETURN(kv, pop_mark());
        }
        if (stack.empty() || stack.back()->kind != Obj::kDict || kv.size() % 2 != 0) {
          return data_loss(where + ": SETITEM(S) without a dict");
        }
        for (size_t k = 0; k < kv.size(); k += 2) stack.back()->dict.emplace_back(kv[k], kv[k + 1]);
        break;
      }
      case 'q':
      case 'r': {
        const size_t len = op == 'q' ? 1 : 4;
        QS_RETURN_IF_ERROR(need(pos, len));
        if (stack.empty()) return data_loss(where + ": BINPUT on an empty stack");
        memo[op == 'q' ? pk[pos] : u32(pk + pos)] = stack.back();
        pos += len;
        break;
      }
      case 'h':
      case 'j': {
        const size_t len = op == 'h' ? 1 : 4;
        QS_RETURN_IF_ERROR(need(pos, len));
        auto it = memo.find(op == 'h' ? pk[pos] : u32(pk + pos));
        if (it == memo.end()) return data_loss(where + ": BINGET of an unknown memo slot");
        stack.push_back(it->second);
        pos += len;
        break;
      }
      case '.': {  // STOP
        QS_ASSIGN_OR_RETURN(P root, pop());
        if (root->kind != Obj::kDict) return data_loss(where + ": the root is not a dict");
        std::vector<std::pair<std::string, Tensor>> out;
        for (const auto& [k, v] : root->dict) {
          if (k->kind != Obj::kStr || v->kind != Obj::kTensor) {
            return data_loss(where + ": a state_dict entry is not name -> tensor");
          }
          out.emplace_back(k->s, v->tensor);
        }
        return out;
      }
      default:
        return unimplemented(
            where + ": pickle opcode 0x" + std::string(1, "0123456789abcdef"[op >> 4]) +
            std::string(1, "0123456789abcdef"[op & 15]) + " at byte " + std::to_string(pos - 1));
    }
  }
}

}  // namespace qs::io
