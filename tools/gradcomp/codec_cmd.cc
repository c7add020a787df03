// gradcomp codec encode|decode: one codec step on raw little-endian float32 files.
//   encode --spec SPEC --in grad.f32 --out msg.bin [--seed S --step T --rank R --bucket B]
//          [--residual FILE]   (stateful specs: memory read if FILE exists, written back)
//   decode --spec SPEC --in msg.bin --out out.f32 [--n N]   (ef()/noef() wrappers are ignored;
//          without --n, headers of more than 2^28 elements are refused)
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "bench/codec_files.h"
#include "commands.h"
#include "gradcomp/registry.h"

namespace gradcomp::cli {

namespace {

struct EncodeFlags {
  bench::EncodeFileRequest request;
};

struct DecodeFlags {
  std::string spec, in, out;
  std::optional<std::size_t> n;
};

}  // namespace

void add_codec_command(CLI::App& app) {
  CLI::App* codec = app.add_subcommand("codec", "Encode or decode one gradient file");
  codec->require_subcommand(1);

  auto enc = std::make_shared<EncodeFlags>();
  CLI::App* encode = codec->add_subcommand(
      "encode", "Compress a float32 file into a message (through the spec's memory)");
  encode
      ->add_option("--spec", enc->request.spec,
                   "Compressor spec, e.g. 'topk:ratio=0.01' or 'ef(qsgd:levels=16)'")
      ->required();
  encode->add_option("--in", enc->request.in, "Gradient: raw little-endian float32")->required();
  encode->add_option("--out", enc->request.out, "Message file to write")->required();
  encode->add_option("--residual", enc->request.residual,
                     "Memory state (float32): loaded if the file exists, then written back");
  encode->add_option("--seed", enc->request.ctx.seed, "Run seed")
      ->capture_default_str()
      ->check(unsigned_integer());
  encode->add_option("--step", enc->request.ctx.step, "Step number")
      ->capture_default_str()
      ->check(unsigned_integer());
  encode->add_option("--rank", enc->request.ctx.rank, "Worker rank")
      ->capture_default_str()
      ->check(unsigned_integer());
  encode->add_option("--bucket", enc->request.ctx.bucket, "Bucket id")
      ->capture_default_str()
      ->check(unsigned_integer());
  encode->callback([enc] {
    const auto r = bench::encode_file(builtin_registry(), enc->request);
    std::cout << "encoded " << r.n << " floats with " << r.memory_spec << " into "
              << r.message_bytes << " bytes" << (r.residual_loaded ? " (residual loaded)" : "")
              << "\n";
  });

  auto dec = std::make_shared<DecodeFlags>();
  CLI::App* decode =
      codec->add_subcommand("decode", "Decode a message into a float32 file (n from its header)");
  decode->add_option("--spec", dec->spec, "The spec it was encoded with (wrappers allowed)")
      ->required();
  decode->add_option("--in", dec->in, "Message file")->required();
  decode->add_option("--out", dec->out, "Output: raw little-endian float32")->required();
  decode
      ->add_option("--n", dec->n,
                   "Elements expected: a header that says otherwise is refused (needed "
                   "above 2^28 elements, 1 GiB of floats)")
      ->check(unsigned_integer());
  decode->callback([dec] {
    const auto r = bench::decode_file(builtin_registry(), dec->spec, dec->in, dec->out, dec->n);
    std::cout << "decoded " << r.n << " floats with " << r.codec_spec << "\n";
  });
}

}  // namespace gradcomp::cli
