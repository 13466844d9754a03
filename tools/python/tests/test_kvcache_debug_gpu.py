"""attnjit.attention_with_kvcache's checks of the cache's contents under ATTNJIT_DEBUG=1, on a
CUDA device: a cached length beyond the capacity (or leaving no room for the appended rows), a
negative one, a block table entry that is not a page of the pool, and ragged new tokens'
boundaries that do not describe q's rows, and FlashMask vectors past the capacity are refused with one AttnjitError naming the entry,
its value and what is accepted, before anything is written (the caches keep their bytes
although the call appends). Without ATTNJIT_DEBUG the same
calls are not checked (no synchronization), and a valid call gives the same output either way.

Skipped unless PyTorch and a CUDA device are available. The seed of the random data is printed;
ATTNJIT_TEST_SEED=<number> repeats a run.

Run: ATTNJIT_LIBRARY=build/libattnjit.so python3 -m unittest discover -s tools/python/tests \
         -p test_kvcache_debug_gpu.py -v
"""

import os
import sys
import unittest
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnjit  # noqa: E402
from cache_dir import TemporaryCacheTest  # noqa: E402
from torch_cuda import HAS_CUDA, run_seed, torch  # noqa: E402

SEED = run_seed()
BATCH, HEADS, KV_HEADS, DIM, NEW, PAGE, PAGES = 3, 8, 2, 64, 2, 16, 4
CAPACITY = PAGE * PAGES


@unittest.skipUnless(HAS_CUDA, "needs PyTorch with a CUDA device")
class KvCacheDebugTest(TemporaryCacheTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        print(f"\ntest_kvcache_debug_gpu: seed {SEED} (ATTNJIT_TEST_SEED={SEED} repeats it)")

    def setUp(self):
        # The library reads ATTNJIT_DEBUG at every call; the environment is restored after.
        environment = mock.patch.dict(os.environ, {"ATTNJIT_DEBUG": "1"})
        environment.start()
        self.addCleanup(environment.stop)
        generator = torch.Generator(device="cuda").manual_seed(SEED)

        def randn(*shape):
            return torch.randn(*shape, generator=generator, device="cuda").to(torch.bfloat16)

        self.q = randn(BATCH, NEW, HEADS, DIM)
        self.k_new, self.v_new = randn(BATCH, NEW, KV_HEADS, DIM), randn(BATCH, NEW, KV_HEADS, DIM)
        self.k_cache = randn(BATCH, CAPACITY, KV_HEADS, DIM)
        self.v_cache = randn(BATCH, CAPACITY, KV_HEADS, DIM)
        self.pool_k = randn(BATCH * PAGES, PAGE, KV_HEADS, DIM)
        self.pool_v = randn(BATCH * PAGES, PAGE, KV_HEADS, DIM)
        self.table = torch.randperm(BATCH * PAGES, device="cuda").view(BATCH, PAGES).int()
        self.lengths = torch.tensor([5, CAPACITY - NEW, 17], dtype=torch.int32, device="cuda")

    def refused(self, message, k_cache, v_cache, lengths, table):
        """Asserts that an appending call fails with `message` and leaves the caches as they
        were."""
        before = k_cache.clone(), v_cache.clone()
        with self.assertRaises(attnjit.AttnjitError) as caught:
            attnjit.attention_with_kvcache(self.q, k_cache, v_cache, lengths, table, k=self.k_new,
                                           v=self.v_new, causal=True)
        torch.cuda.synchronize()
        self.assertEqual(str(caught.exception), message)
        self.assertTrue(torch.equal(k_cache, before[0]), "k_cache written by a refused call")
        self.assertTrue(torch.equal(v_cache, before[1]), "v_cache written by a refused call")

    def test_lengths_beyond_the_capacity(self):
        self.lengths[2] = CAPACITY - NEW + 1
        self.refused(f"kv_cache.cache_seqlens[2]: got '{CAPACITY - NEW + 1}'; accepted: 0 to "
                     f"{CAPACITY - NEW} (the cache holds {CAPACITY} keys per sequence and {NEW} "
                     "are appended)", self.k_cache, self.v_cache, self.lengths, None)
        self.lengths[2] = -3
        self.refused(f"kv_cache.cache_seqlens[2]: got '-3'; accepted: 0 to {CAPACITY - NEW} (the "
                     f"cache holds {CAPACITY} keys per sequence and {NEW} are appended)",
                     self.pool_k, self.pool_v, self.lengths, self.table)

    def test_vectors_past_the_capacity(self):
        # FlashMask vectors over a cache count positions: at most the capacity.
        indices = torch.full((BATCH, 1, CAPACITY, 1), CAPACITY, dtype=torch.int32, device="cuda")
        indices[1, 0, 7, 0] = CAPACITY + 1
        before = self.k_cache.clone()
        with self.assertRaises(attnjit.AttnjitError) as caught:
            attnjit.attention_with_kvcache(self.q, self.k_cache, self.v_cache, self.lengths,
                                           k=self.k_new, v=self.v_new, causal=True,
                                           startend_row_indices=indices)
        torch.cuda.synchronize()
        self.assertEqual(str(caught.exception),
                         f"startend_row_indices[batch=1, head=0, column=7] LTS={CAPACITY + 1} is "
                         f"outside [0, {CAPACITY}]; accepted: 0 <= LTS <= {CAPACITY} (the "
                         "cache's capacity: over a KV cache the rows are positions)")
        self.assertTrue(torch.equal(self.k_cache, before), "k_cache written by a refused call")

    def test_lengths_without_appends(self):
        self.lengths[0] = CAPACITY + 1
        with self.assertRaises(attnjit.AttnjitError) as caught:
            attnjit.attention_with_kvcache(self.q, self.k_cache, self.v_cache, self.lengths)
        self.assertEqual(str(caught.exception),
                         f"kv_cache.cache_seqlens[0]: got '{CAPACITY + 1}'; accepted: 0 to "
                         f"{CAPACITY} (the keys the cache holds per sequence)")

    def test_block_table_entries_outside_the_pool(self):
        # Sequence 0 uses ceil((5 + 2) / 16) = 1 page: an entry past it is never read.
        self.table[0, 3] = 1000
        self.table[1, 2] = BATCH * PAGES
        self.refused(f"kv_cache.block_table[1][2]: got '{BATCH * PAGES}'; accepted: 0 to "
                     f"{BATCH * PAGES - 1} (the pages of k and v; sequence 1 uses its first "
                     f"{PAGES} entries)", self.pool_k, self.pool_v, self.lengths, self.table)
        self.table[1, 2] = 0
        self.table[2, 1] = -1
        self.refused(f"kv_cache.block_table[2][1]: got '-1'; accepted: 0 to {BATCH * PAGES - 1} "
                     "(the pages of k and v; sequence 2 uses its first 2 entries)", self.pool_k,
                     self.pool_v, self.lengths, self.table)

    def test_ragged_boundaries(self):
        q = self.q.reshape(BATCH * NEW, HEADS, DIM)
        for cu, message in (
                ([0, 2, 3, 5], f"kv_cache.cu_seqlens_q[3]: got '5'; accepted: {BATCH * NEW} "
                               "(total_q: the packed rows of q)"),
                ([0, 2, 1, 6], "kv_cache.cu_seqlens_q[2]: got '1'; accepted: >= cu_seqlens_q[1] "
                               "= 2 (boundaries never decrease)"),
                ([0, 3, 4, 6], "kv_cache.max_seqlen_q: got '2'; accepted: at least 3 (sequence 0 "
                               "has that many new tokens)")):
            with self.subTest(cu=cu), self.assertRaises(attnjit.AttnjitError) as caught:
                attnjit.attention_with_kvcache(
                    q, self.k_cache, self.v_cache, self.lengths, causal=True,
                    cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device="cuda"),
                    max_seqlen_q=NEW)
            self.assertEqual(str(caught.exception), message)

    def test_valid_calls_agree_with_and_without_the_checks(self):
        for paged in (False, True):
            k_cache, v_cache = (self.pool_k, self.pool_v) if paged else \
                (self.k_cache, self.v_cache)
            table = self.table if paged else None
            outputs = []
            for debug in ("1", "0"):
                os.environ["ATTNJIT_DEBUG"] = debug
                caches = k_cache.clone(), v_cache.clone()
                outputs.append(attnjit.attention_with_kvcache(
                    self.q, *caches, self.lengths, table, k=self.k_new, v=self.v_new,
                    causal=True))
            torch.cuda.synchronize()
            self.assertTrue(torch.equal(outputs[0], outputs[1]), f"paged={paged}")


if __name__ == "__main__":
    unittest.main()
