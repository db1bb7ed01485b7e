#!/usr/bin/env python3
"""PyTorch baseline for Tilefire's decode benchmark (GPU machines only).

Loads a Hugging Face folder (config.json + safetensors, e.g. one written by `tilefire gen-model`) in bf16 and
times batch-1 greedy decode steps two ways on the same GPU: eager transformers with its dynamic KV cache, and
one decode step captured in a CUDA graph over a StaticCache and replayed per step. Both modes also report their
greedy tokens; tokens[0] comes from the prefill logits, as with `tilefire run --prompt-tokens ...`.

  python3 tests/device/torch_decode.py --model DIR --prompt-tokens 1,2,3 --steps 64 --warmup 8 [--json OUT]
"""
import argparse, inspect, json, os, sys, traceback

# Decode steps run eagerly on a side stream before capture: cuBLAS handles, workspaces and allocator blocks are
# created lazily on first use, and creating them inside a capture either fails or gets baked into the graph.
CAPTURE_WARMUP = 3


def fail(message):
    print(f"torch_decode: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args():
    p = argparse.ArgumentParser(description="PyTorch eager / CUDA-graph decode latency baseline")
    p.add_argument("--model", required=True, help="Hugging Face folder: config.json + model.safetensors")
    p.add_argument("--prompt-tokens", required=True, help="prompt as comma-separated token ids, e.g. 1,2,3")
    p.add_argument("--steps", type=int, default=64, help="timed decode steps")
    p.add_argument("--warmup", type=int, default=8, help="untimed decode steps before the timed ones")
    p.add_argument("--json", help="also write the results to this file")
    a = p.parse_args()
    try:
        a.prompt = [int(t) for t in a.prompt_tokens.split(",") if t.strip()]
    except ValueError:
        fail(f"--prompt-tokens: expected comma-separated integers, got '{a.prompt_tokens}'")
    if not a.prompt or a.steps < 1 or a.warmup < 0:
        fail("need at least one prompt token, --steps >= 1 and --warmup >= 0")
    if not os.path.isdir(a.model):
        fail(f"--model {a.model}: no such folder")
    for need in (("config.json",), ("model.safetensors", "model.safetensors.index.json")):
        if not any(os.path.isfile(os.path.join(a.model, f)) for f in need):
            fail(f"--model {a.model}: missing {' or '.join(need)}")
    return a


def summarize(times_ms, tokens):
    s = sorted(times_ms)

    def pct(q):  # linear interpolation between closest ranks, numpy's default, so numbers match numpy tooling
        k = (len(s) - 1) * q
        lo = int(k)
        return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (k - lo)
    return {"available": True, "median_ms": pct(0.5), "p25_ms": pct(0.25), "p75_ms": pct(0.75),
            "timed_steps": len(s), "tokens": tokens}


def time_loop(torch, untimed, timed, step, after):
    """Runs untimed + timed steps, bracketing step() of the last `timed` with CUDA events. after() (token
    bookkeeping) is not charged; events are read after one final synchronize, so no round trip per step."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(timed)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(timed)]
    for _ in range(untimed):
        step()
        after()
    for start, end in zip(starts, ends):
        start.record()
        step()
        end.record()
        after()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def load_model(torch, auto_cls, path):
    # transformers 5 names the argument dtype=; 4.x called it torch_dtype= (5 still accepts it, deprecated).
    try:
        model, how = auto_cls.from_pretrained(path, dtype=torch.bfloat16), "dtype="
    except TypeError:
        model, how = auto_cls.from_pretrained(path, torch_dtype=torch.bfloat16), "torch_dtype="
    if next(model.parameters()).dtype != torch.bfloat16:
        # An older transformers may file an unknown dtype= away in the config and load float32 weights.
        model = model.to(torch.bfloat16)
    return model.to("cuda").eval(), how


def run_eager(torch, model, prompt, untimed, timed):
    # The prefill creates a DynamicCache; each step appends one token to it, as generate() does by default.
    out = model(input_ids=prompt, use_cache=True)
    cache = out.past_key_values
    state = {"tok": out.logits[:, -1].argmax(-1, keepdim=True)}  # [1, 1]: the next step's input as is
    toks = [state["tok"]]

    def step():
        o = model(input_ids=state["tok"], past_key_values=cache, use_cache=True)
        state["tok"] = o.logits[:, -1].argmax(-1, keepdim=True)

    times = time_loop(torch, untimed, timed, step, lambda: toks.append(state["tok"]))
    return summarize(times, torch.cat(toks).view(-1).tolist())


def make_static_cache(model, cache_len):
    from transformers.cache_utils import StaticCache
    p = next(model.parameters())
    # transformers >= 4.56 / 5.x: StaticCache(config=, max_cache_len=), allocated lazily on first use.
    # Older 4.x wanted the batch size (max_batch_size= or batch_size=), device and dtype up front.
    errors = []
    for extra in ({}, {"max_batch_size": 1, "device": p.device, "dtype": p.dtype},
                  {"batch_size": 1, "device": p.device, "dtype": p.dtype}):
        name = ", ".join(["config=model.config", f"max_cache_len={cache_len}"] + [f"{k}=" for k in extra])
        try:
            return StaticCache(config=model.config, max_cache_len=cache_len, **extra), name
        except TypeError as e:
            errors.append(f"({name}): {e}")
    raise TypeError("StaticCache rejected every keyword set: " + "; ".join(errors))


def run_graph(torch, model, prompt, untimed, timed):
    P, dev = prompt.shape[1], prompt.device
    cache, cache_args = make_static_cache(model, P + CAPTURE_WARMUP + untimed + timed)
    # Releases that take cache_position use it as the row the new key/value is written to. Newer ones keep
    # that position inside the cache as a GPU tensor bumped in place (so a replay advances it) and dropped the
    # argument; there the eager warm-up steps below are real steps, so the cache is never ahead of the tokens.
    takes_pos = "cache_position" in inspect.signature(model.forward).parameters
    print(f"cuda_graph: StaticCache({cache_args}) accepted; cache_position "
          f"{'passed' if takes_pos else 'not taken by this transformers'}")
    positions = torch.arange(P + CAPTURE_WARMUP + untimed + timed, device=dev)
    pre = {"cache_position": positions[:P]} if takes_pos else {}
    # position_ids are always explicit so RoPE never depends on a host-side count frozen in at capture.
    out = model(input_ids=prompt, position_ids=positions[:P].unsqueeze(0), past_key_values=cache,
                use_cache=True, **pre)
    nxt = out.logits[:, -1].argmax(-1)
    toks = [nxt]
    # The graph reads its inputs from these fixed addresses; each step copies the token and position in.
    static_ids = torch.zeros((1, 1), dtype=torch.long, device=dev)
    static_pos = torch.zeros((1,), dtype=torch.long, device=dev)

    def forward_step():
        kw = {"cache_position": static_pos} if takes_pos else {}
        o = model(input_ids=static_ids, position_ids=static_pos.view(1, 1), past_key_values=cache,
                  use_cache=True, **kw)
        return o.logits[:, -1].argmax(-1)  # argmax inside the graph: no extra launch per step

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(CAPTURE_WARMUP):
            static_ids.copy_(nxt.view(1, 1))
            static_pos.copy_(positions[P + i:P + i + 1])
            nxt = forward_step()
            toks.append(nxt)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_next = forward_step()  # recorded, not run: the cache and inputs are unchanged by the capture

    state = {"pos": P + CAPTURE_WARMUP, "prev": nxt}

    def step():
        static_ids.copy_(state["prev"].view(1, 1))
        static_pos.copy_(positions[state["pos"]:state["pos"] + 1])
        graph.replay()

    def after():
        # static_next is overwritten by the next replay, so keep a copy (outside the timed events).
        state["prev"] = static_next.clone()
        state["pos"] += 1
        toks.append(state["prev"])

    times = time_loop(torch, untimed, timed, step, after)
    result = summarize(times, torch.cat(toks).view(-1).tolist())
    result.update(static_cache_args=cache_args, cache_position_arg=takes_pos)
    return result


def main():
    args = parse_args()
    try:
        import torch, transformers
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        fail(f"cannot import torch / transformers: {e}")
    if not torch.cuda.is_available():
        fail("CUDA is not available (torch.cuda.is_available() is False)")
    try:
        model, load_arg = load_model(torch, AutoModelForCausalLM, args.model)
    except (OSError, ValueError) as e:
        fail(f"--model {args.model}: transformers could not load it: {e}")
    cfg = model.config
    bad = [t for t in args.prompt if not 0 <= t < cfg.vocab_size]
    if bad:
        fail(f"--prompt-tokens: ids {bad} are outside the vocabulary [0, {cfg.vocab_size})")
    # Both modes run the same number of steps so their token lists line up; the graph needs CAPTURE_WARMUP
    # eager steps of its own, which count towards the warm-up when --warmup is large enough.
    untimed = max(args.warmup, CAPTURE_WARMUP)
    need, max_ctx = len(args.prompt) + untimed + args.steps, getattr(cfg, "max_position_embeddings", None)
    if max_ctx and need > max_ctx:
        fail(f"prompt + warm-up + steps = {need} tokens exceeds max_position_embeddings {max_ctx}")
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())  # tied tensors count once
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "transformers": transformers.__version__, "model": os.path.abspath(args.model),
              "load_dtype_arg": load_arg, "attn_implementation": getattr(cfg, "_attn_implementation", None),
              "prompt_tokens": args.prompt, "warmup_steps": untimed, "steps": args.steps,
              "weight_bytes": weight_bytes}
    with torch.inference_mode():
        prompt = torch.tensor([args.prompt], dtype=torch.long, device="cuda")
        result["eager"] = run_eager(torch, model, prompt, untimed, args.steps)
        torch.cuda.empty_cache()
        try:
            result["cuda_graph"] = run_graph(torch, model, prompt, untimed - CAPTURE_WARMUP, args.steps)
        except Exception as e:  # any failure here must still leave the eager numbers reported
            traceback.print_exc()
            message = f"{type(e).__name__}: {e}"
            if e.__context__ is not None:  # a failed capture often raises again when the graph context closes
                message += f" (after {type(e.__context__).__name__}: {e.__context__})"
            result["cuda_graph"] = {"available": False, "error": message}

    if result["cuda_graph"]["available"]:  # both lists have the same length by construction
        pairs = zip(result["eager"]["tokens"], result["cuda_graph"]["tokens"])
        diff = [i for i, (a, b) in enumerate(pairs) if a != b]
        result["tokens_match"], result["first_token_mismatch"] = not diff, (diff[0] if diff else None)

    print(f"{result['device']}, torch {result['torch']}, transformers {result['transformers']}, attention "
          f"{result['attn_implementation']}; weights {weight_bytes / 1e9:.3f} GB; prompt {len(args.prompt)} "
          f"tokens; {untimed} warm-up + {args.steps} timed steps")
    for mode in ("eager", "cuda_graph"):
        r = result[mode]
        if not r["available"]:
            print(f"{mode:<10} unavailable: {r['error']}")
            continue
        print(f"{mode:<10} median {r['median_ms']:.3f} ms/step (p25 {r['p25_ms']:.3f}, p75 {r['p75_ms']:.3f}), "
              f"{1e3 / r['median_ms']:.1f} tok/s, {weight_bytes / r['median_ms'] / 1e6:.1f} GB/s of weights")
        print(f"{mode:<10} tokens {r['tokens'][:16]}{' ...' if len(r['tokens']) > 16 else ''}")
    if "tokens_match" in result:
        print("cuda_graph tokens match eager" if result["tokens_match"] else
              f"cuda_graph tokens differ from eager from index {result['first_token_mismatch']}")
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
