#!/usr/bin/env python3
"""What a gradient hook costs through torch's Python API, one at a time: the
floor under light mode's bw_pre hooks (commdebug/_lightbw.py), which go on
every module's output.

    tests/torch2/env.sh run python3 tests/bench/tensor_hooks.py [--rounds R]

A chain of N multiplications of an 8-float tensor, forward (and the graph
freed) or forward + backward, each intermediate given one hook doing
nothing, by:

* torch's Tensor.register_hook (an OrderedDict, a RemovableHandle, the
  node's hook-dict registration);
* the way light mode puts its own (an OrderedDict set as _backward_hooks,
  the node's _register_hook_dict, the hook put in the dict);
* the node's register_prehook;
* light mode's C++ hook on the node (commdebug._gradhook, where it is built
  for this torch: the interpreter's lock taken and the hook called with None
  when it fires, no tensor wrapped, no dict);
* the OrderedDict set as _backward_hooks alone (nothing registered on the
  node: it never fires).

Reported: the time each adds per hook over the bare chain, from the 20th
percentile of the training thread's CPU over R rounds (other load only makes
a round slower).  The variants run in every round, one after the other;
nothing here passes or fails on time.
"""

import argparse
import os
import sys
import time
from collections import OrderedDict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

N = 50
Q = 0.2


def main():
    import torch
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(1)
    w = torch.randn(8, requires_grad=True)

    def nothing(*a):
        return None

    def register_hook(x):
        x.register_hook(nothing)

    def lights_way(x):
        d = OrderedDict()
        x._backward_hooks = d
        x.grad_fn._register_hook_dict(x)
        d[-1] = nothing

    def node_prehook(x):
        x.grad_fn.register_prehook(nothing)

    from commdebug._native import gradhook
    gh = gradhook()

    def cxx_hook(x):
        gh.attach(x, nothing)

    def dict_alone(x):
        d = OrderedDict()
        d[-1] = nothing
        x._backward_hooks = d

    variants = {"none": None, "Tensor.register_hook": register_hook,
                "light mode's way": lights_way, "grad_fn.register_prehook": node_prehook,
                "the dict set alone (never fires)": dict_alone}
    if gh is not None:
        variants["light mode's C++ hook (_gradhook)"] = cxx_hook
    else:
        print("(commdebug._gradhook is not built for this torch: its row is left out)")

    def chain(hook, backward):
        x = w
        for _ in range(N):
            x = x * 1.0001
            if hook is not None:
                hook(x)
        if backward:
            x.sum().backward()

    for hook in variants.values():
        chain(hook, True)
    times = {v: ([], []) for v in variants}
    for _ in range(args.rounds):
        for v, hook in variants.items():
            t0 = time.thread_time_ns()
            chain(hook, False)
            t1 = time.thread_time_ns()
            chain(hook, True)
            t2 = time.thread_time_ns()
            times[v][0].append(t1 - t0)
            times[v][1].append(t2 - t1)

    def at(xs):
        xs = sorted(xs)
        return xs[int(Q * (len(xs) - 1))]
    base = [at(t) for t in times["none"]]
    print("torch %s: a chain of %d multiplications, one hook each; %d rounds; "
          "µs added per hook (the %dth percentile's)" % (torch.__version__, N, args.rounds,
                                                      int(Q * 100)))
    print("  %-36s %16s %22s" % ("", "forward (freed)", "forward + backward"))
    print("  %-36s %13.1f µs %19.1f µs  (the whole chain)" % ("none", base[0] / 1e3,
                                                              base[1] / 1e3))
    for v in variants:
        if v == "none":
            continue
        fw, fb = (at(t) for t in times[v])
        print("  %-36s %+16.2f %+22.2f" % (v, (fw - base[0]) / 1e3 / N, (fb - base[1]) / 1e3 / N))


if __name__ == "__main__":
    main()
