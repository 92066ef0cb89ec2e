#ifndef SCOPEPROXY_SCAN_PREFILTER_H
#define SCOPEPROXY_SCAN_PREFILTER_H

#include <stddef.h>
#include <stdint.h>

/// A Teddy-style filter on the first two bytes of a set of patterns (the technique of Hyperscan's
/// and Rust aho-corasick's "Teddy"): up to eight buckets of byte pairs, each byte's membership
/// looked up by its low and its high nibble with one byte shuffle, 32 positions at a time with
/// AVX2. It never misses a pair of the set; it may accept a pair that is not in it (a bucket of
/// several pairs accepts their nibbles' cross product), which the caller's exact scan then sees
/// through. With at most eight pairs each has its own bucket, and nothing else is accepted.
///
/// Bit b of `first_low[x & 15] & first_high[x >> 4]` is set when byte x begins a pair of bucket b;
/// likewise `second_*` for the byte after it.
struct sp_pair_filter {
    uint8_t first_low[16];
    uint8_t first_high[16];
    uint8_t second_low[16];
    uint8_t second_high[16];
};

/// Fills `filter` for `count` pairs (`firsts[i]`, `seconds[i]`), bucket `i * 8 / count` for pair i:
/// pairs given in sorted order put pairs sharing a first byte in one bucket, which keeps the cross
/// product small.
void sp_pair_filter_build(struct sp_pair_filter *filter, const uint8_t *firsts, const uint8_t *seconds, size_t count);

/// Whether `sp_pair_filter_skip` can run here: x86-64 with AVX2. Asks the CPU each time; the
/// caller keeps the answer (its first call is not meant to race another).
int sp_pair_filter_available(void);

/// The first position i of `bytes` (i + 1 < count) whose pair (bytes[i], bytes[i + 1]) the
/// filter accepts, looking only at whole blocks of 32 positions whose last pair lies in `bytes`;
/// when none does, the first position not looked at (count - 32 or more: fewer than 33 bytes
/// were left). Every position before the one returned is known to begin no pair of the set.
/// Call only when `sp_pair_filter_available()` is true.
size_t sp_pair_filter_skip(const struct sp_pair_filter *filter, const uint8_t *bytes, size_t count);

#endif
