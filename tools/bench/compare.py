#!/usr/bin/env python3
"""attnjit against SDPA (flash, cuDNN, dense mask) and FlexAttention on the FlashMask benchmark
protocol, side by side in one process on one GPU.

For each sequence length (8K x batch 16 and 32K x batch 4: 128K tokens), head dim (64, 128,
256; hidden 4096, so 4096 / d heads), mask family (the twelve of docs/masks.md, synthetic and
seeded: 3-7 documents per 8K sample, 10-14 per 32K) and mode (forward, forward+backward), bf16:
1. attnjit's FlashMask vectors from attnjit.flashmask (the host builders; timed with the
   upload, and with attnjit.build_mask when the package has it), FlexAttention's block mask
   from the family's mask_mod (timed), and SDPA's dense boolean mask where it fits in memory;
2. attnjit's output (and q, k, v gradients in fwd+bwd) checked against FlexAttention's on the
   same inputs (SDPA with the dense mask, or SDPA flash, when FlexAttention is unavailable):
   relative error ||a - r|| / ||r|| above 2e-2 marks the row WRONG and the script exits 1;
3. every implementation timed with CUDA events (warm-up, median / min / max of --runs,
   rotating among 3 input sets); FLOPs count visible pairs exactly: forward 4*B*H*D*pairs,
   forward+backward 3.5x that; SDPA flash and cuDNN run for full and causal only;
4. the peak memory of one forward+backward step of each.
Once per run: the first-call latency of attnjit (cold compile, disk hit, memory hit) and of
FlexAttention (torch.compile) on --latency's family. Prints the markdown report, the summary
table last; --out writes it, and the raw results next to it (FILE.json) for
tools/bench/merge_results.py, which joins the shards of a run split by --seqlens, --head-dims,
--families and --modes.

    python3 tools/bench/compare.py --quick --out quick.md
    python3 tools/bench/compare.py --seqlens 32768 --head-dims 128 --modes fwd+bwd --out s32k.md
"""

import argparse
import datetime
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import families  # noqa: E402
import report  # noqa: E402

HIDDEN = 4096
TOKENS = 131072
MAX_RELATIVE_ERROR = 2e-2
INPUT_SETS = 3
BACKWARD_FLOPS_FACTOR = 2.5
QUICK = dict(seqlens=[8192], head_dims=[128], runs=5, warmup=2)
FULL = dict(seqlens=[8192, 32768], head_dims=[64, 128, 256], runs=10, warmup=3)
HEAD_DIMS = (64, 128, 256)
BLOCK_MASK_TENSORS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices",
                      "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices")


def _list(parser, option, text, accepted, convert=str):
    """A comma-separated option as a list of accepted values, in the protocol's order."""
    try:
        values = [convert(item) for item in text.split(",") if item]
    except ValueError:
        values = None
    if not values or any(value not in accepted for value in values):
        parser.error(f"{option}: got {text!r}; accepted: a comma-separated list of "
                     f"{', '.join(str(a) for a in accepted)}")
    return [value for value in accepted if value in values]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"8K x batch 16, d128, every family and mode, {QUICK['runs']} runs "
                             "(sized for under 5 minutes of H100 time, compiles included)")
    parser.add_argument("--families", default="all",
                        help="comma-separated families, or all: " + ", ".join(families.FAMILIES))
    parser.add_argument("--seqlens", help="comma-separated sequence lengths dividing --tokens "
                                          "(default 8192,32768; --quick: 8192)")
    parser.add_argument("--head-dims", help="comma-separated of 64,128,256 (default all; "
                                            "--quick: 128)")
    parser.add_argument("--modes", default="fwd,fwd+bwd", help="comma-separated of fwd,fwd+bwd")
    parser.add_argument("--runs", type=int, help=f"timed runs (default {FULL['runs']}; "
                                                 f"--quick: {QUICK['runs']})")
    parser.add_argument("--warmup", type=int, help=f"untimed runs first (default "
                                                   f"{FULL['warmup']}; --quick: "
                                                   f"{QUICK['warmup']})")
    parser.add_argument("--tokens", type=int, default=TOKENS,
                        help="tokens per test: batch = tokens / seqlen (protocol: 131072)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the inputs and the masks")
    parser.add_argument("--latency", default="causal_document",
                        help="family of the first-call latency measurement, or none")
    parser.add_argument("--out", help="write the markdown report here, and FILE.json")
    args = parser.parse_args(argv)

    defaults = QUICK if args.quick else FULL
    if args.tokens < 1:
        parser.error(f"--tokens: got {args.tokens}; accepted: an int >= 1")
    args.families = families.FAMILIES if args.families == "all" else \
        _list(parser, "--families", args.families, families.FAMILIES)
    dividing = [s for s in range(64, args.tokens + 1, 64) if args.tokens % s == 0]
    args.seqlens = defaults["seqlens"] if args.seqlens is None else \
        _list(parser, "--seqlens", args.seqlens, dividing, int)
    if any(args.tokens % s for s in args.seqlens):  # the default lengths
        parser.error(f"--tokens: got {args.tokens}; accepted: a multiple of every --seqlens "
                     f"({', '.join(map(str, args.seqlens))})")
    args.head_dims = defaults["head_dims"] if args.head_dims is None else \
        _list(parser, "--head-dims", args.head_dims, HEAD_DIMS, int)
    args.modes = _list(parser, "--modes", args.modes, report.MODES)
    for name, minimum in (("runs", 1), ("warmup", 0)):
        value = getattr(args, name)
        if value is None:
            setattr(args, name, defaults[name])
        elif value < minimum:
            parser.error(f"--{name}: got {value}; accepted: an int >= {minimum}")
    if args.out is not None and Path(args.out).suffix == ".json":
        parser.error(f"--out: got {args.out!r}; accepted: a report file not ending in .json "
                     "(the raw results go next to it, as FILE.json)")
    if args.latency != "none" and args.latency not in families.FAMILIES:
        parser.error(f"--latency: got {args.latency!r}; accepted: none or one of "
                     f"{', '.join(families.FAMILIES)}")
    return args


def protocol_text(args):
    return (f"bf16; hidden {HIDDEN} (heads = {HIDDEN} / head dim), {args.tokens} tokens per "
            f"test (batch = tokens / S); median (min-max) of {args.runs} runs after "
            f"{args.warmup} warm-up, CUDA events, rotating among {INPUT_SETS} input sets; "
            "\"fwd\" is the forward of a training step (inputs require grad), \"fwd+bwd\" adds "
            "o.backward(dO); FLOPs count visible (query, key) pairs exactly: forward "
            f"4*B*H*D*pairs, fwd+bwd {1 + BACKWARD_FLOPS_FACTOR}x; speedup = peer ms / attnjit "
            f"ms; attnjit's check: largest relative error of o (fwd) or o, dq, dk, dv (fwd+bwd) "
            f"against the reference on the same inputs, limit {MAX_RELATIVE_ERROR}; synthetic "
            f"masks seeded with {args.seed} (tools/bench/families.py).")


def device_meta(torch, args):
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                 "--format=csv,noheader"], capture_output=True, text=True,
                                check=True, timeout=30).stdout.split("\n")[0].strip()
    except (OSError, subprocess.SubprocessError):
        driver = "unknown"
    import attnjit

    return {"device": torch.cuda.get_device_name(),
            "driver": f"{driver}, CUDA {torch.version.cuda}",
            "torch": torch.__version__, "attnjit": attnjit.version(),
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "commands": ["python3 " + shlex.join(sys.argv)], "protocol": protocol_text(args)}


def first_line(error):
    text = (str(error).splitlines() or [""])[0][:200]
    return f"{type(error).__name__}: {text}".replace("|", "/")


class Run:
    """One process's measurements: the arguments, the result set and the GPU modules."""

    def __init__(self, args):
        import torch

        import measure
        import peers

        self.args, self.torch, self.measure, self.peers = args, torch, measure, peers
        self.result = report.empty(device_meta(torch, args))

    def fail(self, message):
        print(f"FAILED: {message}", file=sys.stderr, flush=True)
        self.result["failures"].append(message)

    def inputs(self, batch, seqlen, heads, head_dim):
        torch = self.torch
        generator = torch.Generator(device="cuda").manual_seed(self.args.seed)
        shape = (batch, seqlen, heads, head_dim)

        def tensor():
            return torch.randn(shape, dtype=torch.bfloat16, device="cuda", generator=generator)

        sets = [tuple(tensor().requires_grad_() for _ in range(3)) for _ in range(INPUT_SETS)]
        return sets, tensor()

    def masks(self, config, family, q, with_dense=True):
        """Everything one family needs: attnjit's mask and the peers' masks, each as (mask,
        note) with the mask None and the note saying why when it could not be made, and the
        metadata rows timing the first two."""
        torch, peers = self.torch, self.peers
        import attnjit

        seqlen, batch, heads = config["seqlen"], config["batch"], config["heads"]
        mask_heads = families.mask_heads_of(family, heads)
        params = families.parameters(family, seqlen, batch, mask_heads, self.args.seed)
        row = dict(config, family=family)
        metadata = []

        def host_build():
            mask = attnjit.flashmask(family, seqlen, batch=batch, heads=mask_heads, **params)
            mask.attention_arguments(q, False, None)  # uploads the vectors to q's device
            return mask

        first, median, mask = peers.timed(host_build, 3)
        metadata.append(dict(row, impl="attnjit", how="host", first_ms=first, ms=median,
                             note=""))
        if mask.kind == "flashmask":
            try:
                build, note = peers.device_build(family, params, seqlen, batch, mask_heads,
                                                 q.device, mask)
            except AssertionError as error:  # the device builders disagree: a failure
                self.fail(f"S={seqlen} D={config['head_dim']} {family}: {error}")
                build, note = None, "attnjit.build_mask disagrees with the host builders"
            if build is None:
                metadata[-1]["note"] = note
            else:
                first, median, _ = peers.timed(build, 3)
                metadata.append(dict(row, impl="attnjit", how="device (attnjit.build_mask)",
                                     first_ms=first, ms=median, note=""))

        mask_mod = families.mask_mod(family, params, peers.device_tables(
            families.tables(family, params, seqlen, batch), q.device))
        flex = (None, "")
        if mask_mod is not None:
            build, how = peers.block_mask_builder(family, mask_mod, batch, mask_heads, seqlen,
                                                  q.device)
            try:
                first, median, block_mask = peers.timed(build, 3)
                flex = (block_mask, "")
                metadata.append(dict(row, impl="FlexAttention", how=how, first_ms=first,
                                     ms=median, note=""))
            except Exception as error:  # FlexAttention then sits this family out
                flex = (None, f"failed: {how}: {first_line(error)}")
                metadata.append(dict(row, impl="FlexAttention", how=how, first_ms=None,
                                     ms=None, note=flex[1]))
                torch.cuda.empty_cache()

        dense = (None, "")
        if with_dense and family not in ("full", "causal"):
            needed = peers.dense_mask_bytes(family, batch, mask_heads, seqlen)
            free = torch.cuda.mem_get_info()[0]
            if needed > free // 2:
                dense = (None, f"skipped: the dense mask and SDPA's additive copy need "
                               f"{needed / 2**30:.0f} GiB, {free / 2**30:.0f} GiB free")
            else:
                try:
                    dense = (peers.dense_mask(family, mask_mod, batch, mask_heads, seqlen,
                                              q.device), "")
                except Exception as error:  # SDPA with a dense mask then sits it out
                    dense = (None, f"failed: building the dense mask: {first_line(error)}")
                    torch.cuda.empty_cache()
        return mask, flex, dense, metadata

    def implementations(self, family, mask, flex, dense):
        """[(name, Implementation or None, note)] in report order; None with the reason in the
        note where an implementation cannot run."""
        peers = self.peers
        rows = [("attnjit", peers.attnjit_implementation(mask), "")]
        if family in ("full", "causal"):
            rows += [(impl.name, impl, "") for impl in peers.sdpa_implementations(
                family == "causal")]
        else:
            visible, note = dense
            rows.append(("SDPA dense mask",
                         peers.dense_implementation(visible) if visible is not None else None,
                         note))
        block_mask, note = flex
        rows.append(("FlexAttention", None if note else peers.flex_implementation(block_mask),
                     note))
        return rows

    def check(self, config, family, impls, inputs, d_o):
        """attnjit against the first reference that runs; one check row per mode."""
        measure = self.measure
        backward = "fwd+bwd" in self.args.modes
        ours, reference, name, problems = None, None, None, []
        try:
            ours = measure.results(impls[0][1], *inputs, d_o, backward)
        except Exception as error:  # reported as a failure, the peers still run
            problems.append(f"attnjit failed: {first_line(error)}")
        order = ["FlexAttention", "SDPA dense mask", "SDPA flash"]
        candidates = sorted([i for _, i, _ in impls[1:] if i is not None and i.name in order],
                            key=lambda i: order.index(i.name))
        for impl in candidates if ours is not None else []:
            try:
                reference, name = measure.results(impl, *inputs, d_o, backward), impl.name
                break
            except Exception as error:  # try the next reference
                problems.append(f"{impl.name} as reference failed: {first_line(error)}")
        for mode in self.args.modes:
            row = dict(config, family=family, mode=mode, reference=name, errors={})
            if ours is None or reference is None:
                row.update(status="failed" if ours is None else "unchecked",
                           note="; ".join(problems))
                if ours is None:
                    self.fail(f"S={config['seqlen']} D={config['head_dim']} {family} {mode}: "
                              f"{row['note']}")
            else:
                keys = ["o"] + (list(measure.GRADIENTS) if mode == "fwd+bwd" else [])
                row["errors"] = {key: measure.relative_error(ours[key], reference[key])
                                 for key in keys}
                worst = max(row["errors"].values())
                row["status"] = "ok" if worst <= MAX_RELATIVE_ERROR else "WRONG"
                if row["status"] == "WRONG":
                    self.fail(f"S={config['seqlen']} D={config['head_dim']} {family} {mode}: "
                              f"relative errors {row['errors']} vs {name} (limit "
                              f"{MAX_RELATIVE_ERROR})")
            self.result["checks"].append(row)

    def time_all(self, config, family, impls, inputs, d_o, pairs):
        visible = pairs / (config["batch"] * config["heads"] * config["seqlen"] ** 2)
        forward_flops = 4 * config["head_dim"] * pairs
        for mode in self.args.modes:
            backward = mode == "fwd+bwd"
            flops = forward_flops * (1 + BACKWARD_FLOPS_FACTOR if backward else 1)
            for name, impl, note in impls:
                row = dict(config, family=family, mode=mode, impl=name, ms=None, min_ms=None,
                           max_ms=None, tflops=None, visible=visible, note=note)
                if impl is not None:
                    try:
                        row["ms"], row["min_ms"], row["max_ms"] = self.measure.time_step(
                            impl, inputs, d_o, backward, self.args.warmup, self.args.runs)
                        row["tflops"] = flops / (row["ms"] * 1e-3) / 1e12
                    except Exception as error:  # one implementation failing hides no other
                        row["note"] = f"failed: {first_line(error)}"
                        self.torch.cuda.empty_cache()
                        if name == "attnjit":
                            self.fail(f"S={config['seqlen']} D={config['head_dim']} {family} "
                                      f"{mode}: attnjit {row['note']}")
                self.result["timings"].append(row)

    def memory(self, config, family, impls, inputs, d_o, mask_bytes):
        measure = self.measure
        for name, impl, note in impls:
            row = dict(config, family=family, impl=name, step_mib=None,
                       mask_mib=mask_bytes.get(name, 0) / 2**20, note=note)
            if impl is not None:
                try:
                    # attnjit's scratch memory comes from torch's allocator: the peak
                    # holds it.
                    row["step_mib"] = measure.step_peak_mib(impl, inputs, d_o)
                except Exception as error:  # reported in the table
                    row["note"] = f"failed: {first_line(error)}"
                    self.torch.cuda.empty_cache()
            self.result["memory"].append(row)

    def family(self, config, family, inputs, d_o):
        torch = self.torch
        torch._dynamo.reset()
        mask, flex, dense, metadata = self.masks(config, family, inputs[0][0])
        self.result["metadata"] += metadata
        impls = self.implementations(family, mask, flex, dense)
        pairs = mask.visible_pairs(config["heads"])
        self.check(config, family, impls, inputs[0], d_o)
        self.time_all(config, family, impls, inputs, d_o, pairs)
        if "fwd+bwd" in self.args.modes:
            mask_bytes = {"SDPA dense mask": 0 if dense[0] is None else dense[0].numel()}
            if mask.startend_row_indices is not None:
                mask_bytes["attnjit"] = mask.startend_row_indices.numel() * 4
            if flex[0] is not None:
                mask_bytes["FlexAttention"] = sum(
                    t.numel() * t.element_size() for t in
                    (getattr(flex[0], name, None) for name in BLOCK_MASK_TENSORS)
                    if isinstance(t, torch.Tensor))
            self.memory(config, family, impls, inputs[0], d_o, mask_bytes)

    def latency(self, config, family, inputs, d_o):
        """First-call latency rows on `family` (before any other compile of this process)."""
        self.torch._dynamo.reset()
        mask, flex, _, _ = self.masks(config, family, inputs[0][0], with_dense=False)
        impls = {name: (impl, note) for name, impl, note in
                 self.implementations(family, mask, flex, (None, ""))}
        try:
            self.result["latency"] += self.measure.attnjit_latency(
                mask, config["head_dim"], impls["attnjit"][0], inputs[0], d_o)
        except Exception as error:  # attnjit must work: a failure
            self.fail(f"first-call latency of attnjit ({family}): {first_line(error)}")
        flex_impl, note = impls["FlexAttention"]
        try:
            if flex_impl is None:
                raise RuntimeError(note)
            self.result["latency"] += self.measure.flex_latency(flex_impl, inputs[0], d_o)
        except Exception as error:  # reported in the table
            self.result["latency"].append(dict(impl="FlexAttention", what="first call", ms=None,
                                               note=f"failed: {first_line(error)}"))

    def run(self):
        torch, args = self.torch, self.args
        started = time.perf_counter()
        latency_done = args.latency == "none"
        for seqlen in args.seqlens:
            batch = args.tokens // seqlen
            for head_dim in args.head_dims:
                heads = HIDDEN // head_dim
                config = dict(seqlen=seqlen, batch=batch, heads=heads, head_dim=head_dim)
                inputs, d_o = self.inputs(batch, seqlen, heads, head_dim)
                if not latency_done:
                    progress(started, f"first-call latency ({args.latency})")
                    self.latency(config, args.latency, inputs, d_o)
                    latency_done = True
                for family in args.families:
                    progress(started, f"S={seqlen} B={batch} H={heads} D={head_dim} {family}")
                    try:
                        self.family(config, family, inputs, d_o)
                    except Exception as error:  # record it and go on with the next family
                        self.fail(f"S={seqlen} D={head_dim} {family}: {first_line(error)}")
                    torch.cuda.empty_cache()
                del inputs, d_o
                torch.cuda.empty_cache()
        progress(started, "done")
        self.result["meta"]["seconds"] = time.perf_counter() - started
        return self.result


def progress(started, what):
    print(f"[{time.perf_counter() - started:7.1f} s] {what}", file=sys.stderr, flush=True)


def main(argv=None):
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        sys.exit("compare.py: PyTorch is not installed; run it on the GPU machine")
    if not torch.cuda.is_available():
        sys.exit("compare.py: no CUDA device visible to torch; run it on the GPU machine")
    # Every family compiles FlexAttention anew (dynamo is reset per family); never fall back
    # to eager FlexAttention, which materializes the scores.
    for limit in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                  "accumulated_recompile_limit"):
        try:
            setattr(torch._dynamo.config, limit, max(64, getattr(torch._dynamo.config, limit)))
        except (AttributeError, TypeError, ValueError):  # not a knob of this torch version
            pass
    torch.manual_seed(args.seed)
    result = Run(args).run()
    return report.publish(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
