#include "gradcomp/config_agreement.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "gradcomp/error.h"
#include "gradcomp/wire.h"

namespace gradcomp {

namespace {

void put_string(std::vector<std::byte>& out, const std::string& s) {
  const std::size_t at = out.size();
  out.resize(at + 4 + s.size());
  store_le<std::uint32_t>(out.data() + at, static_cast<std::uint32_t>(s.size()));
  if (!s.empty()) std::memcpy(out.data() + at + 4, s.data(), s.size());
}

class Reader {
 public:
  Reader(std::span<const std::byte> bytes, int rank) : bytes_(bytes), rank_(rank) {}

  std::uint32_t u32() {
    need(4);
    const auto v = load_le<std::uint32_t>(bytes_.data() + pos_);
    pos_ += 4;
    return v;
  }
  std::string string() {
    const std::uint32_t len = u32();
    need(len);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }
  bool done() const { return pos_ == bytes_.size(); }
  [[noreturn]] void fail(const std::string& what) const {
    throw CorruptMessage("configuration of rank " + std::to_string(rank_) + ": " + what);
  }

 private:
  void need(std::size_t n) const {
    if (bytes_.size() - pos_ < n) {
      fail("truncated at byte " + std::to_string(pos_) + " of " + std::to_string(bytes_.size()));
    }
  }
  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
  int rank_;
};

const ConfigField* field_at(const ConfigFields& fields, std::size_t i) {
  return i < fields.size() ? &fields[i] : nullptr;
}

std::string value_or_none(const ConfigField* f) { return f ? f->value : "(none)"; }

}  // namespace

std::vector<std::byte> serialize_config(std::span<const ConfigField> fields) {
  std::vector<std::byte> out(4);
  store_le<std::uint32_t>(out.data(), static_cast<std::uint32_t>(fields.size()));
  for (const ConfigField& f : fields) {
    put_string(out, f.name);
    put_string(out, f.value);
  }
  return out;
}

ConfigFields parse_config(std::span<const std::byte> bytes, int rank) {
  Reader in(bytes, rank);
  const std::uint32_t count = in.u32();
  // Each field takes at least 8 bytes: a count larger than that is not a length to trust.
  if (count > bytes.size() / 8)
    in.fail(std::to_string(count) + " fields in " + std::to_string(bytes.size()) + " bytes");
  ConfigFields fields(count);
  for (ConfigField& f : fields) {
    f.name = in.string();
    f.value = in.string();
  }
  if (!in.done()) in.fail("trailing bytes after " + std::to_string(count) + " fields");
  return fields;
}

std::optional<std::string> find_config_disagreement(std::span<const ConfigFields> per_rank) {
  if (per_rank.size() < 2) return std::nullopt;
  std::size_t longest = 0;
  for (const ConfigFields& f : per_rank) longest = std::max(longest, f.size());
  const ConfigFields& reference = per_rank[0];
  for (std::size_t i = 0; i < longest; ++i) {
    const ConfigField* ref = field_at(reference, i);
    for (std::size_t r = 1; r < per_rank.size(); ++r) {
      const ConfigField* mine = field_at(per_rank[r], i);
      if (ref && mine && ref->name != mine->name) {
        // The lists no longer line up: the ranks run different gradcomp builds (or a
        // field list that depends on something the earlier fields did not cover).
        return "ranks disagree on which settings they compare: setting " + std::to_string(i) +
               " is '" + ref->name + "' on rank 0 and '" + mine->name + "' on rank " +
               std::to_string(r) + " (are they running the same gradcomp build?)";
      }
    }
    // Every rank whose value differs from rank 0's; the first is quoted.
    std::vector<std::size_t> differing;
    for (std::size_t r = 1; r < per_rank.size(); ++r) {
      const ConfigField* mine = field_at(per_rank[r], i);
      if (!ref || !mine || ref->value != mine->value) differing.push_back(r);
    }
    if (differing.empty()) continue;
    const std::size_t first = differing.front();
    const ConfigField* named = ref ? ref : field_at(per_rank[first], i);
    std::string line = "ranks disagree on " + named->name + ": rank 0 has " + value_or_none(ref) +
                       ", rank " + std::to_string(first) + " has " +
                       value_or_none(field_at(per_rank[first], i));
    if (differing.size() > 1) {
      constexpr std::size_t kListed = 8;
      line += " (rank 0's value differs on ranks ";
      for (std::size_t k = 1; k < differing.size() && k <= kListed; ++k) {
        line += (k > 1 ? ", " : "") + std::to_string(differing[k]);
      }
      if (differing.size() - 1 > kListed) line += " and more";
      line += " too)";
    }
    return line;
  }
  return std::nullopt;
}

}  // namespace gradcomp
