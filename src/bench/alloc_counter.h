// Counts heap allocations made through the global operator new, for the benchmarks'
// "allocations per call" column. Linking gradcomp_benchlib replaces every overload of
// the global operator new/delete (plain, array, nothrow, aligned) with versions that
// bump one process-wide counter and then call malloc / aligned_alloc; core code that
// needs raw memory (detail/scratch.cc) goes through operator new so it is counted too.
#pragma once

#include <cstdint>

namespace gradcomp::bench {

// Allocations made so far by every thread of the process (relaxed: read it around a
// region where the measured code runs on the calling thread or joins its workers).
std::uint64_t allocation_count();

}  // namespace gradcomp::bench
