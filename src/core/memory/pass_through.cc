// The stateless Memory: compress() is the codec's encode.

#include <algorithm>
#include <utility>

#include "gradcomp/error.h"
#include "gradcomp/memory.h"

namespace gradcomp {

namespace {

class PassThrough final : public Memory {
 public:
  PassThrough(std::shared_ptr<const Codec> codec, std::size_t n)
      : codec_(std::move(codec)), n_(n) {}

  const Codec& codec() const override { return *codec_; }
  std::string spec() const override {
    return codec_->traits().needs_memory ? "noef(" + codec_->spec() + ")" : codec_->spec();
  }
  std::size_t size() const override { return n_; }

  std::size_t compress(std::span<const float> grad, const StepContext& ctx,
                       std::span<std::byte> out) override {
    return codec_->encode(grad, ctx, out);
  }

  void compress_dense(std::span<const float> grad, const StepContext& /*ctx*/,
                      std::span<float> out) override {
    if (grad.size() != n_ || out.size() != n_) {
      throw InvalidArgument("compress_dense: gradient of " + std::to_string(grad.size()) +
                            " and output of " + std::to_string(out.size()) +
                            " elements, memory holds " + std::to_string(n_));
    }
    if (out.data() != grad.data()) std::copy(grad.begin(), grad.end(), out.begin());
  }

  std::vector<StateBuffer> state() override { return {}; }

 private:
  std::shared_ptr<const Codec> codec_;
  std::size_t n_;
};

}  // namespace

std::unique_ptr<Memory> make_pass_through(std::shared_ptr<const Codec> codec, std::size_t n) {
  return std::make_unique<PassThrough>(std::move(codec), n);
}

}  // namespace gradcomp
