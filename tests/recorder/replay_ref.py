"""A small Python replay of a trace through CommDebugMode's bookkeeping.

It follows torch/distributed/tensor/debug/_comm_mode.py (_CommModeModuleTracker
and CommDebugMode.__torch_dispatch__) and ModTracker step by step, so the
tests can check that the recorder's events, replayed the way the reference
would have seen them, give the collective counts the workers know they
issued -- independently of the C analyzer, which the tests also check when
it is built.  Only counts and the module tree are modelled, not op lists.
"""

# CommDebugMode's collective registry, by packet name.
C10D = {"_allgather_base_", "_reduce_scatter_base_", "allgather_", "allgather_coalesced_",
        "allgather_into_tensor_coalesced_", "allreduce_", "allreduce_coalesced_",
        "alltoall_", "alltoall_base_", "broadcast_", "gather_", "scatter_", "reduce_",
        "reduce_scatter_", "reduce_scatter_tensor_coalesced_"}
FUNCOL = {"all_gather_into_tensor", "all_gather_into_tensor_coalesced", "all_reduce",
          "all_reduce_coalesced", "all_to_all_single", "broadcast", "reduce_scatter_tensor",
          "reduce_scatter_tensor_coalesced"}


def packet(op_name):
    """Collective packet CommDebugMode counts an op under, or None."""
    ns, _, rest = op_name.partition(".")
    base = rest.rpartition(".")[0] or rest
    if ns == "c10d" and base in C10D:
        return "c10d." + base
    if ns in ("_c10d_functional", "c10d_functional") and base in FUNCOL:
        return "c10d_functional." + base
    if ns == "_c10d_functional_autograd" and base == "all_to_all_single":
        return "c10d_functional.all_to_all_single"
    if ns == "_dtensor" and base == "shard_dim_alltoall":
        return "_dtensor.shard_dim_alltoall"
    return None


class Region:
    def __init__(self, number, label):
        self.number = number
        self.label = label
        self.comm_counts = {}
        self.module_counts = {"Global": {"forward": {}, "backward": {}}}
        self.helper = {"Global": {"depth": 0}}      # insertion order = table order
        self.module_parents = {"Global": set()}
        self.parent_dict = {}
        self.coll_events = []


def replay(events):
    """[Region, ...] for a list of trace events."""
    parents = {"Global"}
    active = {}
    out = []
    reg = None
    parent_list = ["Global"]
    name = "Global"
    ac = False

    def append(n):
        if n not in parents:
            active[n] = 1
            parents.add(n)
        else:
            active[n] += 1

    def pop(n, bw):
        if n in parents:
            active[n] -= 1
            if active[n] == 0:
                parents.remove(n)
        elif not bw:
            raise AssertionError("module hierarchy tracking is wrong at %s" % n)

    for e in events:
        ev = e["ev"]
        if ev == "region_enter":
            reg = Region(e["region"], e.get("label"))
            out.append(reg)
            parent_list = ["Global"]
            name = "Global"
            ac = False
        elif ev == "region_exit":
            reg = None
        elif ev == "fw_pre":
            ac = e["bw"]
            name = e["mod"]
            append(name)
            if reg is not None and not ac:
                h = reg.helper.setdefault(name, {})
                h["module_type"] = "class '%s'" % e["type"]
                h["depth"] = len(parents) - 1
                if name not in reg.module_parents:
                    reg.module_parents[name] = set(parents)
                reg.parent_dict.setdefault(parent_list[-1], []).append(name)
                parent_list.append(name)
        elif ev == "fw_post":
            pop(e["mod"], e["bw"])
        elif ev == "fw_done":
            ac = e["bw"]
            if reg is not None and not ac:
                parent_list.pop()
                name = parent_list[-1]
        elif ev == "bw_pre":
            ac = False
            name = e["mod"]
        elif ev == "bw_enter":
            append(e["mod"])
        elif ev == "bw_exit":
            pop(e["mod"], True)
        elif ev == "bw_end":
            parents = {"Global"}
        elif ev == "coll" and reg is not None:
            reg.coll_events.append(e)
        elif ev == "op" and reg is not None and not e.get("dt"):
            pkt = packet(e["name"])
            if pkt is None:
                continue
            reg.comm_counts[pkt] = reg.comm_counts.get(pkt, 0) + 1
            key = "backward" if e["bw"] else "forward"
            for m in [name] + [p for p in reg.module_parents[name] if p != name]:
                c = reg.module_counts.setdefault(m, {"forward": {}, "backward": {}})
                c[key][pkt] = c[key].get(pkt, 0) + 1
    return out
