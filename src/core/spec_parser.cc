// Recursive-descent parser for spec strings (grammar in registry.h).
#include <algorithm>
#include <string>

#include "gradcomp/error.h"
#include "gradcomp/registry.h"

namespace gradcomp {

namespace {

bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}
bool is_value_char(char c) {
  return c > ' ' && c < 127 && c != ',' && c != '(' && c != ')' && c != ':' && c != '=';
}
bool is_printable_ascii(char c) { return c >= ' ' && c < 127; }

// The spec as a message quotes it: a byte that is not printable ASCII as \xNN, so that
// the message stays one line of valid text whatever the caller passed (a NUL ended the
// message early in C and in Python; half a UTF-8 character made Python's decoding fail).
std::string escaped(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    if (is_printable_ascii(c)) {
      out += c;
      continue;
    }
    const auto b = static_cast<unsigned char>(c);
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  SpecNode parse_all() {
    if (text_.empty()) fail("empty spec");
    const auto bad = std::find_if_not(text_.begin(), text_.end(), is_printable_ascii);
    if (bad != text_.end()) {
      pos_ = static_cast<std::size_t>(bad - text_.begin());
      fail("byte " + escaped(text_.substr(pos_, 1)) + " is not printable ASCII");
    }
    SpecNode node = parse_node(0);
    if (pos_ != text_.size()) fail("unexpected '" + std::string(1, text_[pos_]) + "'");
    return node;
  }

 private:
  static constexpr int kMaxDepth = 8;

  SpecNode parse_node(int depth) {
    if (depth > kMaxDepth) fail("wrappers nested deeper than " + std::to_string(kMaxDepth));
    SpecNode node;
    node.name = ident("a codec name");
    if (peek() == '(') {
      ++pos_;
      node.inner = std::make_unique<SpecNode>(parse_node(depth + 1));
      expect(')');
      return node;
    }
    if (peek() == ':') {
      ++pos_;
      do {
        std::string key = ident("a parameter name");
        for (const auto& [k, v] : node.params) {
          if (k == key) fail("parameter '" + key + "' given twice");
        }
        expect('=');
        std::string value = value_token(key);
        node.params.emplace_back(std::move(key), std::move(value));
      } while (peek() == ',' && (++pos_, true));
    }
    return node;
  }

  std::string ident(const char* what) {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && is_ident_char(text_[pos_])) ++pos_;
    if (pos_ == start) fail(std::string("expected ") + what);
    return std::string(text_.substr(start, pos_ - start));
  }

  std::string value_token(const std::string& key) {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && is_value_char(text_[pos_])) ++pos_;
    if (pos_ == start) fail("empty value for '" + key + "'");
    return std::string(text_.substr(start, pos_ - start));
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument("spec '" + escaped(text_) + "': " + what + " at position " +
                          std::to_string(pos_));
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

SpecNode parse_spec(std::string_view spec) { return Parser(spec).parse_all(); }

}  // namespace gradcomp
