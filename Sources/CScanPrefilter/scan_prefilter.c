// The secret scanner's prefilter: see include/scan_prefilter.h. Written in C for the vector
// intrinsics (a byte shuffle per nibble table, AVX2 chosen at run time), which Swift's SIMD types
// do not reach.
#include "scan_prefilter.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

void sp_pair_filter_build(struct sp_pair_filter *filter, const uint8_t *firsts, const uint8_t *seconds, size_t count) {
    memset(filter, 0, sizeof *filter);
    for (size_t i = 0; i < count; i++) {
        uint8_t bucket = (uint8_t)(1u << (i * 8 / count));
        filter->first_low[firsts[i] & 15] |= bucket;
        filter->first_high[firsts[i] >> 4] |= bucket;
        filter->second_low[seconds[i] & 15] |= bucket;
        filter->second_high[seconds[i] >> 4] |= bucket;
    }
}

#if defined(__x86_64__)

int sp_pair_filter_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? 1 : 0;
}

/// The bucket bits of the 32 bytes of `v`: one shuffle per nibble table (pshufb looks up within
/// each 128-bit lane, so the tables are broadcast to both).
__attribute__((target("avx2"))) static inline __m256i buckets(__m256i v, __m256i low, __m256i high) {
    const __m256i nibble = _mm256_set1_epi8(0x0f);
    __m256i low_bits = _mm256_shuffle_epi8(low, _mm256_and_si256(v, nibble));
    __m256i high_bits = _mm256_shuffle_epi8(high, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble));
    return _mm256_and_si256(low_bits, high_bits);
}

__attribute__((target("avx2"))) size_t sp_pair_filter_skip(const struct sp_pair_filter *filter, const uint8_t *bytes, size_t count) {
    const __m256i first_low = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)filter->first_low));
    const __m256i first_high = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)filter->first_high));
    const __m256i second_low = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)filter->second_low));
    const __m256i second_high = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)filter->second_high));
    const __m256i zero = _mm256_setzero_si256();
    size_t index = 0;
    // 33 bytes: the block's 32 positions and the byte after the last one.
    while (count >= 33 && index <= count - 33) {
        __m256i here = _mm256_loadu_si256((const __m256i *)(bytes + index));
        __m256i next = _mm256_loadu_si256((const __m256i *)(bytes + index + 1));
        __m256i both = _mm256_and_si256(buckets(here, first_low, first_high), buckets(next, second_low, second_high));
        uint32_t accepted = ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(both, zero));
        if (accepted != 0) return index + (size_t)__builtin_ctz(accepted);
        index += 32;
    }
    return index;
}

#else

int sp_pair_filter_available(void) { return 0; }

size_t sp_pair_filter_skip(const struct sp_pair_filter *filter, const uint8_t *bytes, size_t count) {
    (void)filter;
    (void)bytes;
    (void)count;
    return 0;  // never called: the scanner keeps its portable skip here
}

#endif
