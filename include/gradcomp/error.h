// Exceptions thrown at gradcomp's API boundaries (the style of gloo, faiss and c10d).
// Messages start with the operation's name and give both values, e.g.
//   "topk decode: index 70000 >= n 65536".
#pragma once

#include <stdexcept>
#include <string>

namespace gradcomp {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller's mistake: a bad spec string, flag, parameter or buffer size.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A wire message (or a file holding one) failed validation. Nothing was written.
class CorruptMessage : public Error {
 public:
  using Error::Error;
};

// A peer or the transport failed (timeouts, dead ranks).
class CommError : public Error {
 public:
  using Error::Error;
};

}  // namespace gradcomp
