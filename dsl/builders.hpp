// Builders for the standard FlashMask families of docs/masks.md, on the host, O(N) each.
// Every builder returns one sample (batch = 1, heads = 1, seqlen_q = seqlen_k = N) with the
// causal flag and number of columns of the family's row in the family table (dsl/families.hpp,
// whose rows sit next to these builders in builders.cpp); use stack() and broadcast_heads() to
// batch them. `full` and `causal` have no builder: they are MaskKind::none and MaskKind::causal
// and carry no vectors. Bad parameters throw attnjit::Error naming the parameter, its value and
// what is accepted.
//
// Rows are queries i, columns are keys j; "visible" means not masked.
#pragma once

#include <cstdint>
#include <span>

#include "dsl/intervals.hpp"

namespace attnjit::dsl {

/// Causal sliding window of `window` keys including the diagonal: key j is visible to rows
/// j <= i < j + window. Causal, 1 column: LTS_j = min(j + window, n). n >= 1, window >= 1.
IntervalVectors sliding_window(int n, int window);

/// Packed documents, causal inside each: visible iff j <= i and i, j in the same document.
/// Causal, 1 column: LTS_j = end of j's document. Lengths >= 0 summing to N >= 1.
IntervalVectors causal_document(std::span<const int> doc_lengths);

/// Packed documents, bidirectional inside each: visible iff i, j in the same document.
/// Non-causal, 2 columns: LTS_j = end, UTE_j = start of j's document.
IntervalVectors document(std::span<const int> doc_lengths);

/// One sample of a question followed by answers that share it: causal, and a key in an answer
/// is visible only to rows of that answer (question keys are visible to every later row).
/// Causal, 1 column: question columns LTS = N, answer columns LTS = end of their answer.
/// N = question + sum(answers) >= 1; lengths >= 0; `answers` may be empty.
IntervalVectors share_question(int question, std::span<const int> answers);

/// The first `global` tokens are global (their keys are visible to all rows, their rows see all
/// keys); other keys j are visible to rows i with i - left <= j <= i + right.
/// Non-causal, 4 columns: global columns LTS = LTE = N, UTS = UTE = 0; other columns
/// LTS = min(j + left + 1, N), LTE = N, UTS = global, UTE = max(j - right, global).
/// n >= 1, 0 <= global <= n, left >= 0, right >= 0.
IntervalVectors global_sliding_window(int n, int global, int left, int right);

/// Demonstration blocks followed by a test block: causal; a row of a demonstration block sees
/// only its own block, a row of the test block sees every earlier key. Causal, 2 columns:
/// demonstration columns LTS = end of the block, LTE = start of the test block; test columns
/// LTS = LTE = N. Lengths >= 0; N = sum(blocks) + test >= 1.
IntervalVectors causal_blockwise(std::span<const int> blocks, int test);

/// Prefix LM: the first `prefix` keys are visible to every row, the rest causally
/// (visible iff j < prefix or j <= i). Non-causal, 2 columns: LTS = N; UTE_j = 0 inside the
/// prefix, j after it. n >= 1, 0 <= prefix <= n.
IntervalVectors prefix_lm_causal(int n, int prefix);

/// Packed prefix-LM documents: i and j in the same document d, and j inside d's prefix
/// (the first prefixes[d] tokens of d) or j <= i. Non-causal, 2 columns: LTS = end of the
/// document; UTE_j = start of the document for prefix columns, j otherwise.
/// One prefix per document, 0 <= prefixes[d] <= doc_lengths[d].
IntervalVectors prefix_lm_document(std::span<const int> doc_lengths, std::span<const int> prefixes);

/// Causal with the keys of the segment [offset, offset + length) dropped for the rows before
/// offset + length: visible iff j <= i and not (offset <= j < offset + length and
/// i < offset + length). Causal, 2 columns: segment columns LTS = j, LTE = offset + length;
/// others LTS = LTE = N. n >= 1, offset >= 0, length >= 0, offset + length <= n.
IntervalVectors qk_sparse(int n, int offset, int length);

/// Causal with per-key eviction: key j is visible to rows j <= i < evicted_at_row[j]
/// (evicted_at_row[j] = N for a key never evicted). Causal, 1 column: LTS_j =
/// evicted_at_row[j]. N = evicted_at_row.size() >= 1, values in [0, N].
IntervalVectors random_eviction(std::span<const int> evicted_at_row);

/// Arbitrary valid vectors of the given shape for fuzzing kernels: runs of columns (often
/// aligned to 64 or 128 keys) that are never masked, fully masked, share one interval, follow
/// a diagonal or take random intervals, with row bounds often on or next to tile boundaries.
/// Deterministic for a seed on every platform. Throws Error for a bad causal/columns pair or a
/// non-positive size.
IntervalVectors random_intervals(bool causal, int columns, int batch, int heads, int seqlen_q,
                                 int seqlen_k, std::uint64_t seed);

/// A sample of `seqlen` tokens split into a random number of documents in
/// [min_docs, min(max_docs, seqlen)] of random lengths (each >= 1): causal_document when
/// `causal`, else document. 1 <= min_docs <= max_docs, min_docs <= seqlen.
IntervalVectors random_documents(bool causal, int seqlen, int min_docs, int max_docs,
                                 std::uint64_t seed);

}  // namespace attnjit::dsl
