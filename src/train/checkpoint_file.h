// The checkpoint file format, torch-free (so that a fuzzer links it without LibTorch):
// checkpoint.h adds the LibTorch side (models, optimizer). Checkpoints: one file per rank holding
// the model's parameters and buffers, the optimizer's momentum, every Memory's state and the
// position in the run, so that a killed run resumes on the same trajectory.
//
// File layout (little-endian):
//   0   8  magic "GRADCKPT"
//   8   4  u32 version (1)
//  12   4  u32 CRC-32 (zlib) of the body
//  16   8  u64 body length in bytes (the file is exactly 24 + this)
//  24      body:
//            u64 step, u64 epoch, u64 seed, u32 rank, u32 world, u32 array count
//            per array: u32 name length, name bytes, u8 type (1 = f32, 2 = i64),
//                       u64 element count, count * 4 or 8 bytes of data
// Written to FILE.tmp, fsync'ed, renamed over FILE (and the directory fsync'ed): a
// crash leaves either the old or the new checkpoint, never a torn one.
// Loading validates everything (magic, version, length, CRC, then every array's
// name, type and size against what the caller expects, in order) BEFORE copying a
// single value, and throws InvalidArgument naming the file on any mismatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace gradcomp::train {

struct CheckpointMeta {
  std::uint64_t step = 0;   // global steps completed
  std::uint64_t epoch = 0;  // epoch the next step belongs to
  std::uint64_t seed = 0;
  std::uint32_t rank = 0;
  std::uint32_t world = 1;
};

enum class ArrayType : std::uint8_t { kFloat32 = 1, kInt64 = 2 };

// A named array in caller memory: the source when saving, the destination when loading.
struct ArrayView {
  std::string name;
  ArrayType type = ArrayType::kFloat32;
  void* data = nullptr;
  std::size_t count = 0;  // elements
};

// keep_previous (when not empty): an existing FILE is renamed to it, but only once the
// new checkpoint is written and fsync'ed to FILE.tmp, right before that is renamed over
// FILE. A failed write changes nothing on disk; a crash between the two renames leaves
// the old checkpoint at keep_previous and FILE absent (the resume agreement reads both).
void write_checkpoint(const std::filesystem::path& file, const CheckpointMeta& meta,
                      std::span<const ArrayView> arrays,
                      const std::filesystem::path& keep_previous = {});
// Fills `arrays` (names, types and counts must match the file's, in order) and returns
// the meta. On any error nothing has been written to the arrays.
CheckpointMeta read_checkpoint(const std::filesystem::path& file,
                               std::span<const ArrayView> arrays);

// The same, where the file may hold further arrays around the wanted ones (which keep
// their order): the evaluator reads the model and skips optimizer and memory state.
CheckpointMeta read_checkpoint_subset(const std::filesystem::path& file,
                                      std::span<const ArrayView> arrays);
// The same over a checkpoint already in memory (`file` names it in errors):
// read_checkpoint and read_checkpoint_subset (subset = true) read the file and call this.
CheckpointMeta parse_checkpoint(std::span<const std::byte> buf, const std::filesystem::path& file,
                                std::span<const ArrayView> arrays, bool subset);

// The optimizer whose state a checkpoint holds, from its array names alone ("sgd" for
// "momentum/...", "adamw" for "adamw...."; Optimizer::state in optimizer.h): nullopt for a
// file that is unreadable, not a checkpoint, or holds no optimizer state. Reads the names
// and skips the data; nothing else is validated (loading does that).
std::optional<std::string> checkpoint_optimizer(const std::filesystem::path& file);
// The one line that refuses a checkpoint of the optimizer `theirs` in a run of `ours`.
std::string optimizer_mismatch(const std::filesystem::path& file, std::string_view theirs,
                               std::string_view ours);

// Where rank R of a run keeps its checkpoint (DIR/rank-R.ckpt), and where the one before
// it is kept (FILE.prev) so that ranks can agree on a step all of them hold.
std::filesystem::path rank_checkpoint_file(const std::filesystem::path& dir, int rank);
std::filesystem::path previous_checkpoint_file(const std::filesystem::path& file);

// The step a checkpoint holds, from its header alone (magic and step; nothing else is
// validated): nullopt for a file that is unreadable, short or not a checkpoint.
std::optional<std::uint64_t> checkpoint_step(const std::filesystem::path& file);

}  // namespace gradcomp::train
