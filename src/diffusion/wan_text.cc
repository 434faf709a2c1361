// diffusion: Wan's prompt cleaning and UMT5 prompt encoding (see wan_text.h), after
// diffusers' pipeline_wan.py, Python's html.unescape and ftfy 6.3's fix_text.
#include "diffusion/wan_text.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <unordered_map>

#include "tokenizer/utf8.h"
#include "tokenizer/utf8_nfc.h"

namespace qs::diffusion {

namespace fs = std::filesystem;

// Named as well as anonymous: the layer compiles in unity batches, where another file's local
// is_space or to_utf8 would clash.
namespace {
namespace wan_clean {

// The named character references handled: HTML 4's 252 and &apos;, the HTML5 all-caps forms of
// those (&AMP &COPY &GT &LT &QUOT &REG &TRADE), and the HTML5 names that start with a legacy
// name, so that the longest-prefix fallback never decodes the prefix of a name Python knows in
// full. From Python's html.entities.html5: value, whether Python also accepts the name without
// ";" (legacy), and the value of ftfy's all-caps variant (&EACUTE; -> "É"), where ftfy has one.
struct Entity {
  const char* name;
  const char32_t* value;
  bool legacy;
  const char32_t* upper;
};

// clang-format off
constexpr Entity kEntities[] = {
    {"Aacute", U"\u00c1", true, nullptr}, {"aacute", U"\u00e1", true, U"\u00c1"},
    {"Acirc", U"\u00c2", true, nullptr}, {"acirc", U"\u00e2", true, U"\u00c2"},
    {"acute", U"\u00b4", true, U"\u00b4"}, {"AElig", U"\u00c6", true, nullptr},
    {"aelig", U"\u00e6", true, U"\u00c6"}, {"Agrave", U"\u00c0", true, nullptr},
    {"agrave", U"\u00e0", true, U"\u00c0"}, {"alefsym", U"\u2135", false, U"\u2135"},
    {"Alpha", U"\u0391", false, nullptr}, {"alpha", U"\u03b1", false, U"\u0391"},
    {"AMP", U"&", true, nullptr}, {"amp", U"&", true, nullptr},
    {"and", U"\u2227", false, U"\u2227"}, {"ang", U"\u2220", false, U"\u2220"},
    {"apos", U"'", false, U"'"}, {"Aring", U"\u00c5", true, nullptr},
    {"aring", U"\u00e5", true, U"\u00c5"}, {"asymp", U"\u2248", false, U"\u2248"},
    {"Atilde", U"\u00c3", true, nullptr}, {"atilde", U"\u00e3", true, U"\u00c3"},
    {"Auml", U"\u00c4", true, nullptr}, {"auml", U"\u00e4", true, U"\u00c4"},
    {"bdquo", U"\u201e", false, U"\u201e"}, {"Beta", U"\u0392", false, nullptr},
    {"beta", U"\u03b2", false, U"\u0392"}, {"brvbar", U"\u00a6", true, U"\u00a6"},
    {"bull", U"\u2022", false, U"\u2022"}, {"cap", U"\u2229", false, U"\u2229"},
    {"Ccedil", U"\u00c7", true, nullptr}, {"ccedil", U"\u00e7", true, U"\u00c7"},
    {"cedil", U"\u00b8", true, U"\u00b8"}, {"cent", U"\u00a2", true, U"\u00a2"},
    {"centerdot", U"\u00b7", false, U"\u00b7"}, {"Chi", U"\u03a7", false, nullptr},
    {"chi", U"\u03c7", false, U"\u03a7"}, {"circ", U"\u02c6", false, U"\u02c6"},
    {"clubs", U"\u2663", false, U"\u2663"}, {"cong", U"\u2245", false, U"\u2245"},
    {"COPY", U"\u00a9", true, nullptr}, {"copy", U"\u00a9", true, nullptr},
    {"copysr", U"\u2117", false, nullptr}, {"crarr", U"\u21b5", false, U"\u21b5"},
    {"cup", U"\u222a", false, U"\u222a"}, {"curren", U"\u00a4", true, U"\u00a4"},
    {"Dagger", U"\u2021", false, nullptr}, {"dagger", U"\u2020", false, U"\u2020"},
    {"dArr", U"\u21d3", false, nullptr}, {"darr", U"\u2193", false, U"\u2193"},
    {"deg", U"\u00b0", true, U"\u00b0"}, {"Delta", U"\u0394", false, nullptr},
    {"delta", U"\u03b4", false, U"\u0394"}, {"diams", U"\u2666", false, U"\u2666"},
    {"divide", U"\u00f7", true, U"\u00f7"}, {"divideontimes", U"\u22c7", false, U"\u22c7"},
    {"Eacute", U"\u00c9", true, nullptr}, {"eacute", U"\u00e9", true, U"\u00c9"},
    {"Ecirc", U"\u00ca", true, nullptr}, {"ecirc", U"\u00ea", true, U"\u00ca"},
    {"Egrave", U"\u00c8", true, nullptr}, {"egrave", U"\u00e8", true, U"\u00c8"},
    {"empty", U"\u2205", false, U"\u2205"}, {"emsp", U"\u2003", false, U"\u2003"},
    {"ensp", U"\u2002", false, U"\u2002"}, {"Epsilon", U"\u0395", false, nullptr},
    {"epsilon", U"\u03b5", false, U"\u0395"}, {"equiv", U"\u2261", false, U"\u2261"},
    {"Eta", U"\u0397", false, nullptr}, {"eta", U"\u03b7", false, U"\u0397"},
    {"ETH", U"\u00d0", true, nullptr}, {"eth", U"\u00f0", true, nullptr},
    {"Euml", U"\u00cb", true, nullptr}, {"euml", U"\u00eb", true, U"\u00cb"},
    {"euro", U"\u20ac", false, U"\u20ac"}, {"exist", U"\u2203", false, U"\u2203"},
    {"fnof", U"\u0192", false, U"\u0191"}, {"forall", U"\u2200", false, U"\u2200"},
    {"frac12", U"\u00bd", true, U"\u00bd"}, {"frac14", U"\u00bc", true, U"\u00bc"},
    {"frac34", U"\u00be", true, U"\u00be"}, {"frasl", U"\u2044", false, U"\u2044"},
    {"Gamma", U"\u0393", false, nullptr}, {"gamma", U"\u03b3", false, U"\u0393"},
    {"ge", U"\u2265", false, U"\u2265"}, {"GT", U">", true, nullptr}, {"gt", U">", true, nullptr},
    {"gtcc", U"\u2aa7", false, nullptr}, {"gtcir", U"\u2a7a", false, nullptr},
    {"gtdot", U"\u22d7", false, nullptr}, {"gtlPar", U"\u2995", false, nullptr},
    {"gtquest", U"\u2a7c", false, nullptr}, {"gtrapprox", U"\u2a86", false, nullptr},
    {"gtrarr", U"\u2978", false, nullptr}, {"gtrdot", U"\u22d7", false, nullptr},
    {"gtreqless", U"\u22db", false, nullptr}, {"gtreqqless", U"\u2a8c", false, nullptr},
    {"gtrless", U"\u2277", false, nullptr}, {"gtrsim", U"\u2273", false, nullptr},
    {"hArr", U"\u21d4", false, nullptr}, {"harr", U"\u2194", false, U"\u2194"},
    {"hearts", U"\u2665", false, U"\u2665"}, {"hellip", U"\u2026", false, U"\u2026"},
    {"Iacute", U"\u00cd", true, nullptr}, {"iacute", U"\u00ed", true, U"\u00cd"},
    {"Icirc", U"\u00ce", true, nullptr}, {"icirc", U"\u00ee", true, U"\u00ce"},
    {"iexcl", U"\u00a1", true, U"\u00a1"}, {"Igrave", U"\u00cc", true, nullptr},
    {"igrave", U"\u00ec", true, U"\u00cc"}, {"image", U"\u2111", false, U"\u2111"},
    {"infin", U"\u221e", false, U"\u221e"}, {"int", U"\u222b", false, U"\u222b"},
    {"Iota", U"\u0399", false, nullptr}, {"iota", U"\u03b9", false, U"\u0399"},
    {"iquest", U"\u00bf", true, U"\u00bf"}, {"isin", U"\u2208", false, U"\u2208"},
    {"Iuml", U"\u00cf", true, nullptr}, {"iuml", U"\u00ef", true, U"\u00cf"},
    {"Kappa", U"\u039a", false, nullptr}, {"kappa", U"\u03ba", false, U"\u039a"},
    {"Lambda", U"\u039b", false, nullptr}, {"lambda", U"\u03bb", false, U"\u039b"},
    {"lang", U"\u27e8", false, U"\u27e8"}, {"laquo", U"\u00ab", true, U"\u00ab"},
    {"lArr", U"\u21d0", false, nullptr}, {"larr", U"\u2190", false, U"\u2190"},
    {"lceil", U"\u2308", false, U"\u2308"}, {"ldquo", U"\u201c", false, U"\u201c"},
    {"le", U"\u2264", false, U"\u2264"}, {"lfloor", U"\u230a", false, U"\u230a"},
    {"lowast", U"\u2217", false, U"\u2217"}, {"loz", U"\u25ca", false, U"\u25ca"},
    {"lrm", U"\u200e", false, U"\u200e"}, {"lsaquo", U"\u2039", false, U"\u2039"},
    {"lsquo", U"\u2018", false, U"\u2018"}, {"LT", U"<", true, nullptr},
    {"lt", U"<", true, nullptr}, {"ltcc", U"\u2aa6", false, nullptr},
    {"ltcir", U"\u2a79", false, nullptr}, {"ltdot", U"\u22d6", false, nullptr},
    {"lthree", U"\u22cb", false, nullptr}, {"ltimes", U"\u22c9", false, nullptr},
    {"ltlarr", U"\u2976", false, nullptr}, {"ltquest", U"\u2a7b", false, nullptr},
    {"ltri", U"\u25c3", false, nullptr}, {"ltrie", U"\u22b4", false, nullptr},
    {"ltrif", U"\u25c2", false, nullptr}, {"ltrPar", U"\u2996", false, nullptr},
    {"macr", U"\u00af", true, U"\u00af"}, {"mdash", U"\u2014", false, U"\u2014"},
    {"micro", U"\u00b5", true, U"\u039c"}, {"middot", U"\u00b7", true, U"\u00b7"},
    {"minus", U"\u2212", false, U"\u2212"}, {"Mu", U"\u039c", false, nullptr},
    {"mu", U"\u03bc", false, U"\u039c"}, {"nabla", U"\u2207", false, U"\u2207"},
    {"nbsp", U"\u00a0", true, U"\u00a0"}, {"ndash", U"\u2013", false, U"\u2013"},
    {"ne", U"\u2260", false, U"\u2260"}, {"ni", U"\u220b", false, U"\u220b"},
    {"not", U"\u00ac", true, U"\u00ac"}, {"notin", U"\u2209", false, U"\u2209"},
    {"notindot", U"\u22f5\u0338", false, U"\u22f5\u0338"},
    {"notinE", U"\u22f9\u0338", false, nullptr}, {"notinva", U"\u2209", false, U"\u2209"},
    {"notinvb", U"\u22f7", false, U"\u22f7"}, {"notinvc", U"\u22f6", false, U"\u22f6"},
    {"notni", U"\u220c", false, U"\u220c"}, {"notniva", U"\u220c", false, U"\u220c"},
    {"notnivb", U"\u22fe", false, U"\u22fe"}, {"notnivc", U"\u22fd", false, U"\u22fd"},
    {"nsub", U"\u2284", false, U"\u2284"}, {"Ntilde", U"\u00d1", true, nullptr},
    {"ntilde", U"\u00f1", true, U"\u00d1"}, {"Nu", U"\u039d", false, nullptr},
    {"nu", U"\u03bd", false, U"\u039d"}, {"Oacute", U"\u00d3", true, nullptr},
    {"oacute", U"\u00f3", true, U"\u00d3"}, {"Ocirc", U"\u00d4", true, nullptr},
    {"ocirc", U"\u00f4", true, U"\u00d4"}, {"OElig", U"\u0152", false, nullptr},
    {"oelig", U"\u0153", false, U"\u0152"}, {"Ograve", U"\u00d2", true, nullptr},
    {"ograve", U"\u00f2", true, U"\u00d2"}, {"oline", U"\u203e", false, U"\u203e"},
    {"Omega", U"\u03a9", false, nullptr}, {"omega", U"\u03c9", false, U"\u03a9"},
    {"Omicron", U"\u039f", false, nullptr}, {"omicron", U"\u03bf", false, U"\u039f"},
    {"oplus", U"\u2295", false, U"\u2295"}, {"or", U"\u2228", false, U"\u2228"},
    {"ordf", U"\u00aa", true, U"\u00aa"}, {"ordm", U"\u00ba", true, U"\u00ba"},
    {"Oslash", U"\u00d8", true, nullptr}, {"oslash", U"\u00f8", true, U"\u00d8"},
    {"Otilde", U"\u00d5", true, nullptr}, {"otilde", U"\u00f5", true, U"\u00d5"},
    {"otimes", U"\u2297", false, U"\u2297"}, {"Ouml", U"\u00d6", true, nullptr},
    {"ouml", U"\u00f6", true, U"\u00d6"}, {"para", U"\u00b6", true, U"\u00b6"},
    {"parallel", U"\u2225", false, U"\u2225"}, {"part", U"\u2202", false, U"\u2202"},
    {"permil", U"\u2030", false, U"\u2030"}, {"perp", U"\u22a5", false, U"\u22a5"},
    {"Phi", U"\u03a6", false, nullptr}, {"phi", U"\u03c6", false, U"\u03a6"},
    {"Pi", U"\u03a0", false, nullptr}, {"pi", U"\u03c0", false, U"\u03a0"},
    {"piv", U"\u03d6", false, U"\u03a0"}, {"plusmn", U"\u00b1", true, U"\u00b1"},
    {"pound", U"\u00a3", true, U"\u00a3"}, {"Prime", U"\u2033", false, nullptr},
    {"prime", U"\u2032", false, U"\u2032"}, {"prod", U"\u220f", false, U"\u220f"},
    {"prop", U"\u221d", false, U"\u221d"}, {"Psi", U"\u03a8", false, nullptr},
    {"psi", U"\u03c8", false, U"\u03a8"}, {"QUOT", U"\u0022", true, nullptr},
    {"quot", U"\u0022", true, nullptr}, {"radic", U"\u221a", false, U"\u221a"},
    {"rang", U"\u27e9", false, U"\u27e9"}, {"raquo", U"\u00bb", true, U"\u00bb"},
    {"rArr", U"\u21d2", false, nullptr}, {"rarr", U"\u2192", false, U"\u2192"},
    {"rceil", U"\u2309", false, U"\u2309"}, {"rdquo", U"\u201d", false, U"\u201d"},
    {"real", U"\u211c", false, U"\u211c"}, {"REG", U"\u00ae", true, nullptr},
    {"reg", U"\u00ae", true, nullptr}, {"rfloor", U"\u230b", false, U"\u230b"},
    {"Rho", U"\u03a1", false, nullptr}, {"rho", U"\u03c1", false, U"\u03a1"},
    {"rlm", U"\u200f", false, U"\u200f"}, {"rsaquo", U"\u203a", false, U"\u203a"},
    {"rsquo", U"\u2019", false, U"\u2019"}, {"sbquo", U"\u201a", false, U"\u201a"},
    {"Scaron", U"\u0160", false, nullptr}, {"scaron", U"\u0161", false, U"\u0160"},
    {"sdot", U"\u22c5", false, U"\u22c5"}, {"sect", U"\u00a7", true, U"\u00a7"},
    {"shy", U"\u00ad", true, U"\u00ad"}, {"Sigma", U"\u03a3", false, nullptr},
    {"sigma", U"\u03c3", false, U"\u03a3"}, {"sigmaf", U"\u03c2", false, U"\u03a3"},
    {"sim", U"\u223c", false, U"\u223c"}, {"spades", U"\u2660", false, U"\u2660"},
    {"sub", U"\u2282", false, U"\u2282"}, {"sube", U"\u2286", false, U"\u2286"},
    {"sum", U"\u2211", false, U"\u2211"}, {"sup", U"\u2283", false, U"\u2283"},
    {"sup1", U"\u00b9", true, U"\u00b9"}, {"sup2", U"\u00b2", true, U"\u00b2"},
    {"sup3", U"\u00b3", true, U"\u00b3"}, {"supe", U"\u2287", false, U"\u2287"},
    {"szlig", U"\u00df", true, U"SS"}, {"Tau", U"\u03a4", false, nullptr},
    {"tau", U"\u03c4", false, U"\u03a4"}, {"there4", U"\u2234", false, U"\u2234"},
    {"Theta", U"\u0398", false, nullptr}, {"theta", U"\u03b8", false, U"\u0398"},
    {"thetasym", U"\u03d1", false, U"\u0398"}, {"thinsp", U"\u2009", false, U"\u2009"},
    {"THORN", U"\u00de", true, nullptr}, {"thorn", U"\u00fe", true, nullptr},
    {"tilde", U"\u02dc", false, U"\u02dc"}, {"times", U"\u00d7", true, U"\u00d7"},
    {"timesb", U"\u22a0", false, U"\u22a0"}, {"timesbar", U"\u2a31", false, U"\u2a31"},
    {"timesd", U"\u2a30", false, U"\u2a30"}, {"TRADE", U"\u2122", false, nullptr},
    {"trade", U"\u2122", false, nullptr}, {"Uacute", U"\u00da", true, nullptr},
    {"uacute", U"\u00fa", true, U"\u00da"}, {"uArr", U"\u21d1", false, nullptr},
    {"uarr", U"\u2191", false, U"\u2191"}, {"Ucirc", U"\u00db", true, nullptr},
    {"ucirc", U"\u00fb", true, U"\u00db"}, {"Ugrave", U"\u00d9", true, nullptr},
    {"ugrave", U"\u00f9", true, U"\u00d9"}, {"uml", U"\u00a8", true, U"\u00a8"},
    {"upsih", U"\u03d2", false, U"\u03d2"}, {"Upsilon", U"\u03a5", false, nullptr},
    {"upsilon", U"\u03c5", false, U"\u03a5"}, {"Uuml", U"\u00dc", true, nullptr},
    {"uuml", U"\u00fc", true, U"\u00dc"}, {"weierp", U"\u2118", false, U"\u2118"},
    {"Xi", U"\u039e", false, nullptr}, {"xi", U"\u03be", false, U"\u039e"},
    {"Yacute", U"\u00dd", true, nullptr}, {"yacute", U"\u00fd", true, U"\u00dd"},
    {"yen", U"\u00a5", true, U"\u00a5"}, {"Yuml", U"\u0178", false, nullptr},
    {"yuml", U"\u00ff", true, U"\u0178"}, {"Zeta", U"\u0396", false, nullptr},
    {"zeta", U"\u03b6", false, U"\u0396"}, {"zwj", U"\u200d", false, U"\u200d"},
    {"zwnj", U"\u200c", false, U"\u200c"},
};
// clang-format on

// fix_character_width for U+FF5F..U+FFEE: each form's NFKC (0: none). U+FF01..U+FF5E are
// ASCII shifted by 0xFEE0, and U+FFE3 (fullwidth macron) is two code points.
constexpr char32_t kWidthFF5F[] = {
    0x2985, 0x2986, 0x3002, 0x300c, 0x300d, 0x3001, 0x30fb, 0x30f2, 0x30a1, 0x30a3, 0x30a5, 0x30a7,
    0x30a9, 0x30e3, 0x30e5, 0x30e7, 0x30c3, 0x30fc, 0x30a2, 0x30a4, 0x30a6, 0x30a8, 0x30aa, 0x30ab,
    0x30ad, 0x30af, 0x30b1, 0x30b3, 0x30b5, 0x30b7, 0x30b9, 0x30bb, 0x30bd, 0x30bf, 0x30c1, 0x30c4,
    0x30c6, 0x30c8, 0x30ca, 0x30cb, 0x30cc, 0x30cd, 0x30ce, 0x30cf, 0x30d2, 0x30d5, 0x30d8, 0x30db,
    0x30de, 0x30df, 0x30e0, 0x30e1, 0x30e2, 0x30e4, 0x30e6, 0x30e8, 0x30e9, 0x30ea, 0x30eb, 0x30ec,
    0x30ed, 0x30ef, 0x30f3, 0x3099, 0x309a, 0x1160, 0x1100, 0x1101, 0x11aa, 0x1102, 0x11ac, 0x11ad,
    0x1103, 0x1104, 0x1105, 0x11b0, 0x11b1, 0x11b2, 0x11b3, 0x11b4, 0x11b5, 0x111a, 0x1106, 0x1107,
    0x1108, 0x1121, 0x1109, 0x110a, 0x110b, 0x110c, 0x110d, 0x110e, 0x110f, 0x1110, 0x1111, 0x1112,
    0,      0,      0,      0x1161, 0x1162, 0x1163, 0x1164, 0x1165, 0x1166, 0,      0,      0x1167,
    0x1168, 0x1169, 0x116a, 0x116b, 0x116c, 0,      0,      0x116d, 0x116e, 0x116f, 0x1170, 0x1171,
    0x1172, 0,      0,      0x1173, 0x1174, 0x1175, 0,      0,      0,      0x00a2, 0x00a3, 0x00ac,
    0,      0x00a6, 0x00a5, 0x20a9, 0,      0x2502, 0x2190, 0x2191, 0x2192, 0x2193, 0x25a0, 0x25cb};

struct EntityIndex {
  std::unordered_map<std::string, const Entity*> by_name;
  std::unordered_map<std::string, const char32_t*> upper;  // ftfy's all-caps names
};

const EntityIndex& entity_index() {
  static const EntityIndex index = [] {
    EntityIndex x;
    for (const Entity& e : kEntities) {
      x.by_name.emplace(e.name, &e);
      if (e.upper) {
        std::string up = e.name;
        for (char& c : up) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
        x.upper.emplace(std::move(up), e.upper);
      }
    }
    return x;
  }();
  return index;
}

// The name as an ASCII string, or "" when a code point is not ASCII (no entity has one).
std::string ascii_name(const std::u32string& s, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    if (s[i] >= 0x80) return "";
    out.push_back(static_cast<char>(s[i]));
  }
  return out;
}

bool is_digit(char32_t c) {
  return c >= '0' && c <= '9';
}
bool is_hex(char32_t c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool is_letter(char32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_alnum(char32_t c) {
  return is_digit(c) || is_letter(c);
}

// Python's str.isspace, which is also what re's \s matches in a str pattern.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Windows-1252 for bytes 0x80..0x9F, the five it leaves undefined kept as Latin-1 (ftfy's
// "sloppy-windows-1252", and html's _invalid_charrefs).
char32_t cp1252(char32_t c) {
  static constexpr char32_t kHigh[32] = {
      0x20AC, 0x81,   0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
      0x2039, 0x0152, 0x8D,   0x017D, 0x8F,   0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
      0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D,   0x017E, 0x0178};
  return kHigh[c - 0x80];
}

// html._replace_charref for a numeric reference: saturated at 0x110000, which like any value
// past U+10FFFF becomes U+FFFD.
std::u32string numeric_reference(uint32_t num) {
  if (num == 0) return U"\ufffd";
  if (num == 0x0D) return U"\r";
  if (num >= 0x80 && num <= 0x9F) return std::u32string(1, cp1252(num));
  if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) return U"\ufffd";
  // html._invalid_codepoints: C0 and C1 controls but whitespace, and the noncharacters.
  if ((num >= 0x01 && num <= 0x08) || num == 0x0B || (num >= 0x0E && num <= 0x1F) ||
      (num >= 0x7F && num <= 0x9F) || (num >= 0xFDD0 && num <= 0xFDEF) ||
      (num & 0xFFFE) == 0xFFFE) {
    return U"";
  }
  return std::u32string(1, static_cast<char32_t>(num));
}

// Parses the digits of s[begin, end) in base 10 or 16, saturating.
uint32_t parse_number(const std::u32string& s, size_t begin, size_t end, uint32_t base) {
  uint32_t num = 0;
  for (size_t i = begin; i < end; ++i) {
    const char32_t c = s[i];
    const uint32_t digit = is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10;
    num = std::min<uint32_t>(num * base + digit, 0x110000);
  }
  return num;
}

// Python's html.unescape: at each "&", the first of "#[0-9]+;?", "#[xX][0-9a-fA-F]+;?" and
// "[^\t\n\f <&#;]{1,32};?" that matches is replaced; a named one that is no entity falls back
// to its longest prefix that is a legacy name ("&notit;" -> "¬it;").
std::u32string html_unescape(const std::u32string& s) {
  if (s.find(U'&') == std::u32string::npos) return s;
  const EntityIndex& index = entity_index();
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != U'&') {
      out.push_back(s[i++]);
      continue;
    }
    const size_t start = i + 1;
    if (start < s.size() && s[start] == U'#') {
      const bool hex = start + 1 < s.size() && (s[start + 1] == U'x' || s[start + 1] == U'X');
      const size_t digits = start + (hex ? 2 : 1);
      size_t end = digits;
      while (end < s.size() && (hex ? is_hex(s[end]) : is_digit(s[end]))) ++end;
      if (end == digits) {  // "&#" with no number: the named form excludes "#" too
        out.push_back(s[i++]);
        continue;
      }
      out += numeric_reference(parse_number(s, digits, end, hex ? 16 : 10));
      i = end + (end < s.size() && s[end] == U';');
      continue;
    }
    size_t end = start;
    while (end < s.size() && end - start < 32 && s[end] != U'\t' && s[end] != U'\n' &&
           s[end] != U'\f' && s[end] != U' ' && s[end] != U'<' && s[end] != U'&' &&
           s[end] != U'#' && s[end] != U';') {
      ++end;
    }
    if (end == start) {
      out.push_back(s[i++]);
      continue;
    }
    const bool semicolon = end < s.size() && s[end] == U';';
    const size_t after = end + semicolon;
    const std::string name = ascii_name(s, start, end);
    auto it = index.by_name.find(name);
    if (it != index.by_name.end() && (semicolon || it->second->legacy)) {
      out += it->second->value;
      i = after;
      continue;
    }
    // Python tries s[:x] for x from len(s) - 1 down to 2, s being the name and its ";".
    bool found = false;
    for (size_t x = after - start - 1; x >= 2 && !found; --x) {
      auto p = index.by_name.find(ascii_name(s, start, start + x));
      if (p != index.by_name.end() && p->second->legacy) {
        out += p->second->value;
        out.append(s, start + x, after - start - x);
        found = true;
      }
    }
    if (!found) out.append(s, i, after - i);
    i = after;
  }
  return out;
}

// ftfy's unescape_html: "&#?[0-9A-Za-z]{1,24};" replaced when it is an HTML5 name (or an
// all-caps one of ftfy's list), or a numeric reference that html.unescape decodes whole and
// to something without ";".
std::u32string ftfy_unescape(const std::u32string& s) {
  const EntityIndex& index = entity_index();
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != U'&') {
      out.push_back(s[i++]);
      continue;
    }
    const bool numeric = i + 1 < s.size() && s[i + 1] == U'#';
    const size_t body = i + 1 + numeric;
    size_t end = body;
    while (end < s.size() && is_alnum(s[end])) ++end;
    if (end == body || end - body > 24 || end >= s.size() || s[end] != U';') {
      out.push_back(s[i++]);
      continue;
    }
    const std::u32string whole = s.substr(i, end + 1 - i);
    if (numeric) {
      const std::u32string decoded = html_unescape(whole);
      out += decoded.find(U';') == std::u32string::npos ? decoded : whole;
    } else {
      const std::string name = ascii_name(s, body, end);
      auto it = index.by_name.find(name);
      auto up = index.upper.find(name);
      if (it != index.by_name.end()) {
        out += it->second->value;
      } else if (up != index.upper.end()) {
        out += up->second;
      } else {
        out += whole;
      }
    }
    i = end + 1;
  }
  return out;
}

// ftfy's LIGATURES: Latin ligatures and legacy digraphs, taken apart.
struct Ligature {
  char32_t from;
  const char32_t* to;
};
constexpr Ligature kLigatures[] = {
    {0x0132, U"IJ"},      {0x0133, U"ij"},      {0x0149, U"\u02bcn"}, {0x01C4, U"D\u017d"},
    {0x01C5, U"D\u017e"}, {0x01C6, U"d\u017e"}, {0x01C7, U"LJ"},      {0x01C8, U"Lj"},
    {0x01C9, U"lj"},      {0x01CA, U"NJ"},      {0x01CB, U"Nj"},      {0x01CC, U"nj"},
    {0x01F1, U"DZ"},      {0x01F2, U"Dz"},      {0x01F3, U"dz"},      {0xFB00, U"ff"},
    {0xFB01, U"fi"},      {0xFB02, U"fl"},      {0xFB03, U"ffi"},     {0xFB04, U"ffl"},
    {0xFB05, U"\u017ft"}, {0xFB06, U"st"},
};

// fix_character_width then uncurl_quotes of one code point, appended to *out.
void append_width_and_quotes(char32_t c, std::u32string* out) {
  if (c == 0x3000) {
    c = U' ';
  } else if (c >= 0xFF01 && c <= 0xFF5E) {
    c -= 0xFEE0;
  } else if (c == 0xFFE3) {
    out->push_back(U' ');
    c = 0x0304;
  } else if (c >= 0xFF5F && c <= 0xFFEE && kWidthFF5F[c - 0xFF5F] != 0) {
    c = kWidthFF5F[c - 0xFF5F];
  }
  if (c == 0x02BC || (c >= 0x2018 && c <= 0x201B)) c = U'\'';
  if (c >= 0x201C && c <= 0x201F) c = U'"';
  out->push_back(c);
}

// The character fixes of one round of ftfy's fix_and_explain after unescape_html and
// fix_encoding, in its order; fix_surrogates has nothing to do on text decoded from UTF-8.
// The first four map each code point on its own, so they are applied one code point at a time.
std::u32string ftfy_fix_characters(const std::u32string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c >= 0x80 && c <= 0x9F) c = cp1252(c);  // fix_c1_controls
    const Ligature* lig = nullptr;
    if ((c >= 0x0132 && c <= 0x01F3) || (c >= 0xFB00 && c <= 0xFB06)) {
      for (const Ligature& l : kLigatures) {
        if (l.from == c) lig = &l;
      }
    }
    if (!lig) {
      append_width_and_quotes(c, &out);
      continue;
    }
    for (const char32_t* p = lig->to; *p; ++p) append_width_and_quotes(*p, &out);
  }
  // fix_line_breaks, remove_terminal_escapes, remove_control_chars.
  std::u32string fixed;
  fixed.reserve(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    char32_t c = out[i];
    if (c == U'\r') {
      if (i + 1 < out.size() && out[i + 1] == U'\n') ++i;
      c = U'\n';
    } else if (c == 0x2028 || c == 0x2029) {  // and U+0085, which fix_c1_controls took
      c = U'\n';
    }
    fixed.push_back(c);
  }
  std::u32string kept;
  kept.reserve(fixed.size());
  for (size_t i = 0; i < fixed.size(); ++i) {
    if (fixed[i] == 0x1B && i + 1 < fixed.size() && fixed[i + 1] == U'[') {
      // ANSI "\033[" [0-9;]* [a-zA-Z] (ftfy's \d also takes non-ASCII digits, which no
      // terminal sends).
      size_t j = i + 2;
      while (j < fixed.size() && (is_digit(fixed[j]) || fixed[j] == U';')) ++j;
      if (j < fixed.size() && is_letter(fixed[j])) {
        i = j;
        continue;
      }
    }
    kept.push_back(fixed[i]);
  }
  std::u32string clean;
  clean.reserve(kept.size());
  for (char32_t c : kept) {
    const bool control = c <= 0x08 || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
                         (c >= 0x206A && c <= 0x206F) || c == 0xFEFF ||
                         (c >= 0xFFF9 && c <= 0xFFFC);
    if (!control) clean.push_back(c);
  }
  return clean;
}

std::string to_utf8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) tok::utf8_append(c, &out);
  return out;
}

std::u32string from_utf8(std::string_view s) {
  const std::string valid = tok::utf8_make_valid(s);
  std::u32string out;
  for (size_t i = 0; i < valid.size();) {
    char32_t c = 0;
    const size_t n = tok::utf8_char_len(valid, i, &c);
    out.push_back(c);
    i += n;
  }
  return out;
}

// ftfy.fix_text: lines (at most a million code points each) fixed one by one, each until it
// stops changing.
std::u32string ftfy_fix_text(const std::u32string& text) {
  constexpr size_t kMaxDecodeLength = 1000000;
  std::u32string out;
  bool unescape = true;  // "auto": off from the first segment that holds a "<" on
  for (size_t pos = 0; pos < text.size();) {
    const size_t newline = text.find(U'\n', pos);
    size_t end = newline == std::u32string::npos ? text.size() : newline + 1;
    end = std::min(end, pos + kMaxDecodeLength);
    std::u32string seg = text.substr(pos, end - pos);
    if (seg.find(U'<') != std::u32string::npos) unescape = false;
    while (true) {
      std::u32string fixed = ftfy_fix_characters(unescape ? ftfy_unescape(seg) : seg);
      // NFC changes nothing below U+0300 (utf8_nfc's own shortcut, without the round trip).
      if (std::any_of(fixed.begin(), fixed.end(), [](char32_t c) { return c >= 0x300; })) {
        fixed = from_utf8(tok::utf8_nfc(to_utf8(fixed)));
      }
      if (fixed == seg) break;
      seg = std::move(fixed);
    }
    out += seg;
    pos = end;
  }
  return out;
}

}  // namespace wan_clean
}  // namespace

std::string wan_prompt_clean(std::string_view text) {
  using namespace wan_clean;
  const std::u32string s = html_unescape(html_unescape(ftfy_fix_text(from_utf8(text))));
  // basic_clean's strip, then whitespace_clean: re.sub(r"\s+", " ") and strip.
  std::u32string out;
  bool space = false;
  for (char32_t c : s) {
    if (is_space(c)) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out.push_back(U' ');
    space = false;
    out.push_back(c);
  }
  return to_utf8(out);
}

Result<WanTextEncoder> WanTextEncoder::load(const std::string& pipeline_dir) {
  const fs::path dir(pipeline_dir);
  for (const char* sub : {"tokenizer", "text_encoder"}) {
    if (!fs::is_directory(dir / sub)) {
      return not_found((dir / sub).string() + ": no such folder (WanPipeline's UMT5 " + sub + ")");
    }
  }
  WanTextEncoder e;
  QS_ASSIGN_OR_RETURN(e.tokenizer_, tok::UnigramTokenizer::load((dir / "tokenizer").string()));
  QS_ASSIGN_OR_RETURN(e.encoder_, T5Encoder::load((dir / "text_encoder").string()));
  const T5Config& c = e.encoder_.config();
  const std::string config = (dir / "text_encoder" / "config.json").string();
  if (c.model_type != "umt5") {
    return invalid_argument(config + ": model_type \"" + c.model_type +
                            "\", but Wan's text encoder is UMT5 (\"umt5\")");
  }
  if (e.tokenizer_->vocab_size() > c.vocab_size) {
    return invalid_argument((dir / "tokenizer" / "tokenizer.json").string() + ": " +
                            std::to_string(e.tokenizer_->vocab_size()) +
                            " pieces, more than the encoder's vocab_size " +
                            std::to_string(c.vocab_size) + " (" + config + ")");
  }
  return e;
}

Result<WanPromptTokens> WanTextEncoder::tokenize(std::string_view prompt,
                                                 int64_t max_sequence_length) const {
  if (max_sequence_length < 1 || max_sequence_length > kMaxSequenceLength) {
    return invalid_argument("wan: max_sequence_length " + std::to_string(max_sequence_length) +
                            " (must be 1 to " + std::to_string(kMaxSequenceLength) + ")");
  }
  if (prompt.size() > kMaxPromptBytes) {
    return invalid_argument("wan: the prompt is " + std::to_string(prompt.size()) +
                            " bytes, above the limit of " + std::to_string(kMaxPromptBytes));
  }
  // As UnigramTokenizer::encode_padded, which does not say how many ids are the prompt's.
  const size_t keep = static_cast<size_t>(max_sequence_length - 1);
  WanPromptTokens t;
  QS_ASSIGN_OR_RETURN(t.ids, tokenizer_->encode(wan_prompt_clean(prompt), keep));
  if (t.ids.size() > keep) t.ids.resize(keep);
  t.ids.push_back(tokenizer_->eos_id());
  t.n_valid = static_cast<int64_t>(t.ids.size());
  t.ids.resize(static_cast<size_t>(max_sequence_length), tokenizer_->pad_id());
  return t;
}

Result<std::vector<float>> WanTextEncoder::encode(const std::string& prompt,
                                                  int64_t max_sequence_length,
                                                  ThreadPool& pool) const {
  QS_ASSIGN_OR_RETURN(WanPromptTokens t, tokenize(prompt, max_sequence_length));
  // With the mask, the prompt's rows attend to the prompt's keys only and every other step is
  // per row, so they come out the same when the padding is left out; the padding's rows,
  // which the pipeline zeroes, are not computed (a 20-token prompt costs 20 rows, not 512).
  std::vector<int32_t> prompt_ids(t.ids.begin(), t.ids.begin() + t.n_valid);
  std::vector<float> hidden;
  QS_RETURN_IF_ERROR(encoder_.forward(prompt_ids, &hidden, pool));
  hidden.resize(static_cast<size_t>(max_sequence_length * hidden_size()), 0.0f);
  return hidden;
}

}  // namespace qs::diffusion
