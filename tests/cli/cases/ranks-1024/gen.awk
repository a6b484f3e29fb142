# Writes the traces of a small failing job for the ranks-* golden cases:
#   awk -v W=4 -v F="FAULT ..." -f gen.awk   (in an empty directory)
# Every rank runs S steps (regions, labelled "step N"), each a forward of
# Net.blocks.0 .. Net.blocks.(B-1) then their backward in reverse order; each
# block's forward and backward issue one c10d.allreduce_ of 4096 bytes
# torch.float32 in process group 0 (seq 1, 2, ...).  Events are 1 ms apart; t0
# is the same on every rank.  FAULT is KIND:RANK:STEP:BLOCK[:ARG], the
# collective being the forward one of that block, or its backward one with
# KIND:RANK:STEP:BLOCK:bw[:ARG]:
#   size   RANK sends twice the bytes         type   RANK all-gathers instead
#   skip   RANK does not issue it             extra  RANK issues it twice
#   gap    RANK's line of it is lost          swap   RANK runs BLOCK and BLOCK+1
#                                                    in swapped order in STEP
#   sleep  RANK issues it ARG s late          stop   RANK's trace ends before it
#   end    every rank's trace ends right after issuing it (RANK: any), the
#          others waiting ARG s (a hung job killed)
#   empty  RANK's trace is an empty file      cutfirst  RANK's trace is cut
#                                                    before its first line
#   after  RANK's trace ends right after the region_exit of STEP (BLOCK: any)
# With E=1 the meta events say "ends":true and each rank's trace ends with an
# end event of a normal exit, or as D says for its rank: D="RANK:HOW ...",
# HOW one of none (no end event: killed), exc (a RuntimeError whose message
# has two lines), codeN (sys.exit(N)), sigN (signal N), odd (an unknown how).
# With P=1 the blocks' collectives go to tensor-parallel pairs instead: process
# group "1" holds ranks 0 and 1, "2" ranks 2 and 3, and so on.
# Output: rankR.jsonl for each rank.
# 0 when RANK has no fault KIND at (s, b, phase), else its ARG (1 without)
function fault(kind, r, s, b, phase,   i, p, bw, arg) {
	for (i = 1; i <= nf; i++) {
		split(fs[i], p, ":")
		bw = p[5] == "bw"
		arg = bw ? p[6] : p[5]
		if (p[1] == kind && (p[2] == r || kind == "end") && p[3] == s && p[4] == b &&
		    bw == (phase == "bw"))
			return arg == "" ? 1 : arg
	}
	return 0
}
# the end event of rank r (E=1), as D says
function endev(r,   i, p, n, how) {
	how = "exit"
	n = split(D, p, " ")
	for (i = 1; i <= n; i++)
		if (p[i] ~ ("^" r ":"))
			how = substr(p[i], length(r) + 2)
	if (how == "none") return
	if (how == "exit") ev("{\"ev\":\"end\",\"how\":\"exit\"")
	else if (how == "exc") ev("{\"ev\":\"end\",\"how\":\"exception\",\"exc\":\"RuntimeError\",\"msg\":\"[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29500\\nException raised from recvBytes\"")
	else if (how ~ /^code/) ev(sprintf("{\"ev\":\"end\",\"how\":\"exit\",\"code\":%d", substr(how, 5)))
	else if (how ~ /^sig/) ev(sprintf("{\"ev\":\"end\",\"how\":\"signal\",\"signal\":%d,\"name\":\"%s\"", substr(how, 4), substr(how, 4) == 15 ? "SIGTERM" : "SIGINT"))
	else ev("{\"ev\":\"end\",\"how\":\"vanished\"")
}
# the BLOCK of fault KIND of rank r in step s (any), for faults not tied to one
function fault_block(kind, r, s,   i, p) {
	for (i = 1; i <= nf; i++) {
		split(fs[i], p, ":")
		if (p[1] == kind && p[2] == r && p[3] == s) return p[4]
	}
	return -1
}
function ev(text) {
	t += 1000000
	printf "%s,\"t\":%.0f}\n", text, t > f
}
function coll(r, s, b, m, phase,   by, name, w) {
	if (fault("stop", r, s, b, phase)) { stopped = 1; return }
	if (fault("skip", r, s, b, phase)) return
	by = fault("size", r, s, b, phase) ? 8192 : 4096
	name = fault("type", r, s, b, phase) ? "c10d.allgather_" : "c10d.allreduce_"
	if ((w = fault("sleep", r, s, b, phase)) > 0) t += w * 1e9
	seq++
	if (!fault("gap", r, s, b, phase))
		ev(sprintf("{\"ev\":\"op\",\"name\":\"%s.default\",\"bw\":%s,\"pg\":\"%s\",\"seq\":%d,\"bytes\":%d,\"dtype\":\"torch.float32\"", name, phase == "bw" ? "true" : "false", pgname, seq, by))
	if (fault("extra", r, s, b, phase)) {
		seq++
		ev(sprintf("{\"ev\":\"op\",\"name\":\"%s.default\",\"bw\":%s,\"pg\":\"%s\",\"seq\":%d,\"bytes\":%d,\"dtype\":\"torch.float32\"", name, phase == "bw" ? "true" : "false", pgname, seq, by))
	}
	if ((w = fault("end", r, s, b, phase)) > 0) {
		t += (w == 1 ? 0 : w) * 1e9
		ev("{\"ev\":\"op\",\"name\":\"aten.add.Tensor\",\"bw\":false")
		stopped = 1
	}
}
BEGIN {
	if (!W) W = 4
	if (!S) S = 3
	if (!B) B = 2
	nf = split(F, fs, " ")
	for (r = 0; r < W; r++) {
		f = sprintf("rank%d.jsonl", r)
		t = 0; seq = 0; stopped = 0
		if (fault("empty", r, 0, 0)) { printf "" > f; close(f); continue }
		if (fault("cutfirst", r, 0, 0)) { printf "{\"ev\":\"meta\",\"form" > f; close(f); continue }
		printf "{\"ev\":\"meta\",\"format\":\"commdebug-trace\",\"version\":1,\"rank\":%d,\"world_size\":%d,\"t0\":1700000000000000000%s}\n", r, W, E ? ",\"ends\":true" : "" > f
		printf "{\"ev\":\"pg\",\"name\":\"0\",\"ranks\":[],\"t\":0}\n" > f
		pgname = "0"
		if (P) {
			pgname = int(r / 2) + 1
			printf "{\"ev\":\"pg\",\"name\":\"%s\",\"ranks\":[%d,%d],\"t\":0}\n", pgname, r - r % 2, r - r % 2 + 1 > f
		}
		for (s = 1; s <= S && !stopped; s++) {
			ev(sprintf("{\"ev\":\"region_enter\",\"region\":%d,\"label\":\"step %d\"", s, s))
			ev("{\"ev\":\"fw_pre\",\"mod\":\"Net\",\"type\":\"m.Net\",\"bw\":false")
			for (k = 0; k < B && !stopped; k++) {
				b = k
				if (fault("swap", r, s, k)) b = k + 1
				else if (k > 0 && fault("swap", r, s, k - 1)) b = k - 1
				m = "Net.blocks." b
				ev(sprintf("{\"ev\":\"fw_pre\",\"mod\":\"%s\",\"type\":\"m.Block\",\"bw\":false", m))
				coll(r, s, k, m, "fw")
				if (stopped) break
				ev(sprintf("{\"ev\":\"fw_post\",\"mod\":\"%s\",\"bw\":false", m))
				ev(sprintf("{\"ev\":\"fw_done\",\"mod\":\"%s\",\"bw\":false", m))
			}
			if (stopped) break
			ev("{\"ev\":\"fw_post\",\"mod\":\"Net\",\"bw\":false")
			ev("{\"ev\":\"fw_done\",\"mod\":\"Net\",\"bw\":false")
			ev("{\"ev\":\"bw_pre\",\"mod\":\"Net\"")
			ev("{\"ev\":\"bw_enter\",\"mod\":\"Net\"")
			for (k = B - 1; k >= 0 && !stopped; k--) {
				m = "Net.blocks." k
				ev(sprintf("{\"ev\":\"bw_pre\",\"mod\":\"%s\"", m))
				ev(sprintf("{\"ev\":\"bw_enter\",\"mod\":\"%s\"", m))
				coll(r, s, k, m, "bw")
				if (stopped) break
				ev(sprintf("{\"ev\":\"bw_exit\",\"mod\":\"%s\"", m))
			}
			if (stopped) break
			ev("{\"ev\":\"bw_exit\",\"mod\":\"Net\"")
			ev("{\"ev\":\"bw_end\"")
			ev(sprintf("{\"ev\":\"region_exit\",\"region\":%d", s))
			if (fault("after", r, s, fault_block("after", r, s))) stopped = 1
		}
		if (E) endev(r)
		close(f)
	}
}
