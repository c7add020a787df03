// Exceptions thrown at gradcomp's API boundaries (the style of gloo, faiss and c10d).
// Messages start with the operation's name and give both values, e.g.
//   "topk decode: index 70000 >= n 65536".
#pragma once

#include <cstdint>
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

// A codec could not encode one bucket's data, e.g. a decomposition failed on it.
// bucket() is the StepContext::bucket it was encoding, so that the trainer, which knows
// the bucket's tensor, can name it.
class EncodeError : public InvalidArgument {
 public:
  EncodeError(std::uint32_t bucket, const std::string& what)
      : InvalidArgument(what), bucket_(bucket) {}
  std::uint32_t bucket() const { return bucket_; }

 private:
  std::uint32_t bucket_;
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
