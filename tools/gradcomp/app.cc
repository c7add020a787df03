// run_app(): what both CLI binaries do with their argv. Every error (a gradcomp::Error,
// a flag CLI11 rejects, anything else thrown) ends the program with one line
// "gradcomp: <message>" on stderr and exit status 1.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <exception>
#include <iostream>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "gradcomp/error.h"

namespace gradcomp::cli {

namespace {

// Error messages are printed on one line, whatever they contain.
std::string one_line(std::string_view what, bool first_line_only) {
  std::string out;
  for (char c : what) {
    if (c == '\n' || c == '\r') {
      if (first_line_only) break;
      c = ' ';
    }
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out.empty() ? "unknown error" : out;
}

int fail(std::string_view message, bool first_line_only = false) {
  // One write: ranks of one run share the terminal, and std::cerr (unbuffered) would
  // write each piece on its own, interleaving their lines.
  const std::string line = "gradcomp: " + one_line(message, first_line_only) + "\n";
  std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
  std::cerr.flush();
  return 1;
}

}  // namespace

CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != value.size() || !(v >= 0) || !std::isfinite(v)) {
          return value + " is not a number >= 0";
        }
        return {};
      },
      "NUMBER>=0");
}

namespace {

// The whole of `value` as an integer; nullopt for anything else (trailing text, overflow).
std::optional<long long> whole_integer(const std::string& value) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != value.size()) return std::nullopt;
  return v;
}

}  // namespace

CLI::Validator integer_at_least(long long min) {
  return CLI::Validator(
      [min](std::string& value) -> std::string {
        const std::optional<long long> v = whole_integer(value);
        if (!v || *v < min) return value + " is not an integer >= " + std::to_string(min);
        return {};
      },
      "INT>=" + std::to_string(min));
}

CLI::Validator integer_in(long long min, long long max) {
  const std::string range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& value) -> std::string {
        const std::optional<long long> v = whole_integer(value);
        if (!v || *v < min || *v > max) return value + " is not an integer in " + range;
        return {};
      },
      "INT in " + range);
}

CLI::Validator number_in(double min, double max) {
  auto text = [](double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  const std::string range = "[" + text(min) + ", " + text(max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& value) -> std::string {
        double v = 0;
        std::size_t used = 0;
        try {
          v = std::stod(value, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        // Written so that NaN fails (CLI::Range lets it through).
        if (used == 0 || used != value.size() || !(v >= min && v <= max)) {
          return value + " is not a number in " + range;
        }
        return {};
      },
      "NUMBER in " + range);
}

CLI::Validator non_empty_path() {
  // No description: --help keeps showing the type alone (TEXT).
  return CLI::Validator(
      [](std::string& value) -> std::string { return value.empty() ? "the path is empty" : ""; },
      "");
}

CLI::Validator unsigned_integer() {
  // The sign and the range are judged here: CLI11's conversion still refuses what is not a
  // number, but reads a number past 2^64 - 1 as 2^64 - 1, silently. No description, so
  // that --help keeps showing the type alone (UINT).
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const std::size_t first = value.find_first_not_of(" \t");
        if (first != std::string::npos && value[first] == '-') {
          return value + " is not an integer >= 0";
        }
        std::uint64_t v = 0;
        const char* end = value.data() + value.size();
        if (std::from_chars(value.data(), end, v).ec == std::errc::result_out_of_range) {
          return value + " is larger than " +
                 std::to_string(std::numeric_limits<std::uint64_t>::max());
        }
        return {};
      },
      "");
}

int run_app(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);  // runs the chosen command's callback
  } catch (const ExitStatus& e) {
    return e.code;
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --help-all, --version
  } catch (const CLI::ParseError& e) {
    // CLI11 checks required flags before it complains about unknown ones; a typo'd
    // flag or command is the more useful thing to report.
    const std::vector<std::string> extra = app.remaining(/*recurse=*/true);
    if (!extra.empty()) {
      std::string list;
      for (const auto& a : extra) list += (list.empty() ? "" : " ") + a;
      return fail("unexpected argument(s): " + list + " (see gradcomp --help)");
    }
    return fail(std::string(e.what()) + " (see gradcomp --help)");
  } catch (const gradcomp::Error& e) {
    return fail(e.what());
  } catch (const std::bad_alloc&) {
    return fail("out of memory");
  } catch (const std::exception& e) {
    // Third-party errors (LibTorch's carry a backtrace after the first line).
    return fail(e.what(), /*first_line_only=*/true);
  }
  return 0;
}

}  // namespace gradcomp::cli
