/* commdebug report: the page's script (embedded by src/views/html/embed.py).
 *
 * Builds the page from the JSON blocks the command embedded:
 *   cd-meta    what was read, which region and rank the tree shows, the op cap
 *   cd-ranks   the post-mortem (commdebug ranks --json), several traces only
 *   cd-counts  total and per-collective counts (commdebug counts --json)
 *   cd-tree    the module tree (commdebug analyze --json -n 3, op lists capped)
 *   cd-nccl    NCCL calls per collective and per module (analyze --json's "nccl")
 * Numbers are shown as those reports give them; nothing is recounted here.
 * No network: everything the page needs is in the file. */
(function () {
	"use strict";

	function data(id) {
		var el = document.getElementById("cd-" + id);
		return el ? JSON.parse(el.textContent) : null;
	}

	/* el("tag.class#id", {attr: value}, child...) */
	function el(spec, attrs) {
		var m = /^([a-z0-9]+)((?:[.#][\w-]+)*)$/.exec(spec);
		var node = document.createElement(m[1]);
		(m[2].match(/[.#][\w-]+/g) || []).forEach(function (p) {
			if (p[0] === ".")
				node.classList.add(p.slice(1));
			else
				node.id = p.slice(1);
		});
		if (attrs)
			Object.keys(attrs).forEach(function (k) {
				if (attrs[k] !== null && attrs[k] !== undefined)
					node.setAttribute(k, String(attrs[k]));
			});
		for (var i = 2; i < arguments.length; i++)
			add(node, arguments[i]);
		return node;
	}

	function add(node, kid) {
		if (kid === null || kid === undefined || kid === false)
			return;
		if (Array.isArray(kid))
			kid.forEach(function (k) { add(node, k); });
		else if (typeof kid === "object")
			node.appendChild(kid);
		else
			node.appendChild(document.createTextNode(String(kid)));
	}

	function plural(n, one, many) {
		return n + " " + (n === 1 ? one : (many || one + "s"));
	}

	function bytes(n) {
		if (n === null || n === undefined)
			return "-";
		var units = ["B", "KiB", "MiB", "GiB", "TiB"], v = n, u = 0;
		while (v >= 1024 && u < units.length - 1) {
			v /= 1024;
			u++;
		}
		return (u ? v.toFixed(v < 10 ? 2 : 1) : String(v)) + " " + units[u];
	}

	function regionName(region, label) {
		return "region " + region + (label !== null && label !== undefined ? " \u201c" + label + "\u201d" : "");
	}

	var meta = data("meta") || {};
	var ranks = data("ranks");
	var counts = data("counts");
	var tree = data("tree");
	var nccl = data("nccl");
	var app = document.getElementById("app");

	/* ---- header ---- */
	function header() {
		var shown = meta.shown || {};
		var lines = [];
		lines.push(el("h1", null, "commdebug report"));
		if (meta.flight_recorder_only) {
			lines.push(el("p.sub", null, plural((meta.traces || []).length, "Flight Recorder dump") +
				": the post-mortem across ranks (a dump has no modules: no module tree or counts)"));
			return lines;
		}
		if (meta.summaries_only) {
			lines.push(el("p.sub", null, plural((meta.traces || []).length, "summary file") +
				": the post-mortem across ranks (a summary keeps no module tree or counts: give the traces for those)"));
			return lines;
		}
		lines.push(el("p.sub", null,
			plural((meta.traces || []).length, "trace") + "; module tree and counts of " +
			(shown.rank !== null && shown.rank !== undefined ? "rank " + shown.rank + " (" + shown.path + ")" : shown.path) +
			", " + regionName(meta.region, meta.label) + " \u2014 " + (meta.region_rule || "")));
		if (meta.region_complete === false)
			lines.push(el("p.note", null, "This region has no region_exit: the trace ends inside it, so its counts stop where the trace stops."));
		lines.push(regionList());
		return lines;
	}

	/* the trace's regions, and how to show another */
	function regionList() {
		var ts = meta.traces || [], rs = meta.regions,
			how = "commdebug report --region N -o FILE " + (ts.length <= 3 ? ts.join(" ") : "TRACE...");
		if (!rs)
			return el("p.sub.regions", null, "Another region: " + how + " (without --region: the last complete one).");
		var parts = rs.list.map(function (r, i) {
			var gap = i > 0 && r.region !== rs.list[i - 1].region + 1 && rs.list.length < rs.count
				? "\u2026 " + (rs.count - rs.list.length) + " more \u2026, " : "";
			return gap + r.region + (r.label !== null ? " \u201c" + r.label + "\u201d" : "") +
				(r.complete ? "" : " (cut)") + (r.region === meta.region ? " (shown)" : "");
		});
		return el("p.sub.regions", null, "The trace has " + plural(rs.count, "region") +
			(rs.count > 1 ? ": " + parts.join(", ") + ". Another one: " + how : "") + ".");
	}

	/* ---- post-mortem (several ranks) ---- */
	function stateLine(s) {
		var parts = ["rank " + s.rank + ": " + (s.end_text || s.end)];
		if (s.stack && s.stack.length)
			parts.push("stopped in " + s.stack.map(function (f) { return f.module + " (" + f.phase + ")"; }).join(" > "));
		if (s.last_collective) {
			var c = s.last_collective;
			parts.push("last collective pg " + c.pg + " seq " + c.seq + " " + c.collective +
				(c.module === null && c.record_id !== undefined ? " (Flight Recorder record " + c.record_id +
					(c.state ? ", " + c.state : "") + ")" : " from " + c.module + " (" + c.phase + ")"));
		}
		if (s.last_op)
			parts.push("last op " + s.last_op.name + " in " + s.last_op.module);
		if (s.last_event_s !== null && s.last_event_s !== undefined)
			parts.push("last event at " + s.last_event_s.toFixed(3) + " s");
		return el("p.state", null, parts.join("; "));
	}

	function postmortem() {
		var sec = el("section#postmortem");
		sec.appendChild(el("h2", null, "Post-mortem across " + plural(ranks.traces.length, "trace") +
			(ranks.world_size !== null && ranks.world_size !== undefined ? " (world size " + ranks.world_size + ")" : "")));
		var f = ranks.findings || [];
		if (f.length) {
			sec.appendChild(el("div.banner.bad#verdict", null, "FINDINGS: " + f.length + " (the first is the likeliest cause)"));
			var ol = el("ol.findings#findings");
			f.forEach(function (x) {
				ol.appendChild(el("li.finding", {"data-kind": x.kind},
					el("span.kind", null, x.kind), el("span.text", null, x.text),
					(x.states || []).map(stateLine)));
			});
			sec.appendChild(ol);
		} else {
			sec.appendChild(el("div.banner#verdict." + (ranks.agree ? "good" : "bad"), null,
				ranks.agree ? "Every rank agrees: same collectives in the same order, nobody late" : "The ranks disagree"));
		}
		if ((ranks.missing_ranks || []).length)
			sec.appendChild(el("p.note", null, "missing ranks (no trace): " + ranks.missing_ranks.join(", ")));
		if ((ranks.duplicate_ranks || []).length)
			sec.appendChild(el("p.note", null, "duplicate ranks (left out): " + JSON.stringify(ranks.duplicate_ranks)));
		var tb = el("tbody");
		ranks.traces.forEach(function (t) {
			tb.appendChild(el("tr", {"data-rank": t.rank},
				el("td.num", null, t.rank === null ? "-" : t.rank), el("td.mono", null, t.path),
				el("td", null, t.end_text ? t.end_text : t.end + (t.region !== null && t.region !== undefined ? " in " + regionName(t.region, t.label) : "")),
				el("td.num", null, t.events), el("td.num", null, t.regions), el("td.num", null, t.collectives),
				el("td.num", null, t.last_event_s === null || t.last_event_s === undefined ? "-" : t.last_event_s.toFixed(3))));
		});
		sec.appendChild(el("h3", null, "Ranks"));
		sec.appendChild(el("table#ranks", null, el("thead", null, el("tr", null,
			el("th.num", null, "rank"), el("th", null, "trace"), el("th", null, "end"), el("th.num", null, "events"),
			el("th.num", null, "regions"), el("th.num", null, "collectives"), el("th.num", null, "last event (s)"))), tb));
		if ((ranks.steps || []).length) {
			sec.appendChild(el("h3", null, "Steps"));
			var ul = el("ul#steps");
			ranks.steps.forEach(function (s) {
				var what = s.first_region === s.last_region ? regionName(s.first_region, s.label)
					: "regions " + s.first_region + "\u2013" + s.last_region;
				ul.appendChild(el("li", null, what + ": " + (s.groups || []).map(function (g) {
					return (g.ranks.length === 1 ? "rank " : "ranks ") + g.ranks.join(",") + " " + g.state +
						(g.collectives !== null && g.collectives !== undefined ? ", " + plural(g.collectives, "collective") : "");
				}).join("; ")));
			});
			sec.appendChild(ul);
		}
		return sec;
	}

	/* ---- counts ---- */
	function countsSection() {
		var sec = el("section#counts");
		sec.appendChild(el("h2", null, "Collective counts, " + regionName(meta.region, meta.label)));
		var tb = el("tbody", null, el("tr#count-total", {"data-n": counts.total},
			el("td", null, el("b", null, "total")), el("td.num", null, counts.total)));
		Object.keys(counts.counts).forEach(function (k) {
			tb.appendChild(el("tr.count", {"data-coll": k, "data-n": counts.counts[k]},
				el("td.mono", null, k), el("td.num", null, counts.counts[k])));
		});
		sec.appendChild(el("table#counts-table", null, tb));
		var src = counts.by_source || {};
		Object.keys(src).forEach(function (s) {
			sec.appendChild(el("p.note", null, "attributed by the recorder to " + s + " (not added to the counts): " +
				Object.keys(src[s]).map(function (k) { return k + " " + src[s][k]; }).join(", ")));
		});
		return sec;
	}

	/* ---- module tree ---- */
	var DIRS = [["forward", "operations_forward"], ["backward", "operations_backward"],
		["checkpointing", "operations_checkpointing"]];

	function opCount(m) {
		var n = 0;
		DIRS.forEach(function (d) { n += m[d[1]].length + (m[d[1] + "_omitted"] || 0); });
		return n;
	}

	function opsPanel(m) {
		var box = el("div.ops");
		DIRS.forEach(function (d) {
			var list = m[d[1]], left = m[d[1] + "_omitted"] || 0;
			if (!list.length && !left)
				return;
			box.appendChild(el("h4." + d[0], null, d[0] === "checkpointing" ? "ACTIVATION CHECKPOINTING" : d[0].toUpperCase() + " PASS"));
			var tb = el("tbody");
			list.forEach(function (op) {
				tb.appendChild(el("tr.op", {"data-dir": d[0]},
					el("td.op", null, op.name),
					el("td.mono", null, op.input_shape.join(", ")),
					el("td.mono", null, op.input_sharding.join(", ")),
					el("td.mono", null, op.device_mesh)));
			});
			box.appendChild(el("table", null, el("thead", null, el("tr", null, el("th", null, "op"),
				el("th", null, "input shape"), el("th", null, "input sharding"), el("th", null, "device mesh"))), tb));
			if (left)
				box.appendChild(el("p.note.omitted", {"data-omitted": left}, "\u2026 and " + plural(left, "more op") +
					" not embedded (at most " + meta.max_ops + " per list: commdebug report --max-ops)"));
		});
		return box;
	}

	function collChips(list, dir) {
		return list.map(function (c) {
			return el("span.cnt." + dir, {"data-dir": dir, "data-coll": c[0], "data-n": c[1],
				title: dir + " pass: " + c[0] + " counted " + c[1] + " times"}, c[0] + " \u00d7" + c[1]);
		});
	}

	function node(m, depth) {
		var li = el("li.mod", {"data-fqn": m.fqn});
		var kids = m.children || [];
		var fold = el("button.fold", {type: "button", "aria-label": "fold"}, "\u25be");
		if (!kids.length)
			fold.classList.add("leaf");
		fold.addEventListener("click", function () {
			li.classList.toggle("folded");
			fold.textContent = li.classList.contains("folded") ? "\u25b8" : "\u25be";
		});
		var row = el("div.row", null, fold, el("span.name", null, m.fqn),
			m.module_type ? el("span.type", null, m.module_type) : null,
			collChips(m.collectives_forward, "forward"), collChips(m.collectives_backward, "backward"));
		var n = opCount(m);
		if (n) {
			var btn = el("button.ops-toggle", {type: "button", "aria-expanded": "false"}, plural(n, "op"));
			var panel = null;
			btn.addEventListener("click", function () {
				if (!panel) { /* built on first use: big trees stay light */
					panel = opsPanel(m);
					row.after(panel);
				} else {
					panel.hidden = !panel.hidden;
				}
				btn.setAttribute("aria-expanded", panel.hidden ? "false" : "true");
			});
			row.appendChild(btn);
		}
		li.appendChild(row);
		if (kids.length) {
			var ul = el("ul");
			kids.forEach(function (k) { ul.appendChild(node(k, depth + 1)); });
			li.appendChild(ul);
		}
		return li;
	}

	function treeSection() {
		var sec = el("section#tree");
		sec.appendChild(el("h2", null, "Module tree, " + regionName(meta.region, meta.label)));
		sec.appendChild(el("p.note", null, "As CommDebugMode counts them: each module with the collectives counted in its ",
			el("span.cnt.forward", null, "forward"), " and ", el("span.cnt.backward", null, "backward"),
			" pass (a collective counts for every module it ran under). The op button lists the module's operations " +
			"(noise level 3)." + (meta.omitted_ops ? " " + plural(meta.omitted_ops, "op") + " in all were left out of the lists (--max-ops " + meta.max_ops + ")." : "")));
		sec.appendChild(el("ul.tree", null, node(tree, 0)));
		return sec;
	}

	/* ---- NCCL ---- */
	function chart(id, rows, label, value, text, alt) {
		var max = 0;
		rows.forEach(function (r) { var v = value(r); if (v > max) max = v; });
		var box = el("div.chart#" + id, {role: "img"});
		rows.forEach(function (r) {
			var v = value(r) || 0;
			var fill = el("div.fill" + (alt ? ".alt" : ""));
			fill.style.width = (max > 0 ? (100 * v / max) : 0).toFixed(2) + "%";
			box.appendChild(el("div.label", {title: label(r)}, label(r)));
			box.appendChild(el("div.track", {"data-value": v}, fill));
			box.appendChild(el("div.value", null, text(r)));
		});
		return box;
	}

	function ncclSection() {
		var n = nccl.nccl;
		var sec = el("section#nccl");
		sec.appendChild(el("h2", null, "NCCL traffic"));
		sec.appendChild(el("p.note", null, n.source + ": " + plural(n.calls, "call") + ", " + n.charged_calls +
			" charged to modules, " + n.timed_calls + " with GPU time" +
			(n.lost_calls ? ", " + n.lost_calls + " NOT RECORDED (the recorder's queue was full or its trace not open)" : "") +
			(n.collectives_without_nccl_calls ? "; " + plural(n.collectives_without_nccl_calls, "collective") + " without an NCCL call" : "")));
		var colls = n.collectives || [];
		function collLabel(c) { return c.func + (c.nranks !== null ? " (" + c.nranks + " ranks)" : ""); }
		if (colls.length) {
			sec.appendChild(el("h3", null, "Bytes per collective"));
			sec.appendChild(chart("nccl-bytes", colls, collLabel, function (c) { return c.bytes; },
				function (c) { return bytes(c.bytes) + " in " + plural(c.calls, "call"); }));
			sec.appendChild(el("h3", null, "Bus bandwidth per collective (GB/s, timed calls)"));
			sec.appendChild(chart("nccl-busbw", colls, collLabel, function (c) { return c.busbw_gbps || 0; },
				function (c) { return c.busbw_gbps === null ? "no GPU time" : c.busbw_gbps.toFixed(3) + " GB/s (algbw " + c.algbw_gbps.toFixed(3) + ")"; }, true));
		}
		var mods = [];
		(n.regions || []).forEach(function (r) { if (r.region === meta.region) mods = r.modules; });
		if (mods.length) {
			function modLabel(m) { return m.fqn + " " + m.direction + " " + m.func; }
			sec.appendChild(el("h3", null, "Bytes per module, " + regionName(meta.region, meta.label)));
			sec.appendChild(chart("nccl-mod-bytes", mods, modLabel, function (m) { return m.bytes; },
				function (m) { return bytes(m.bytes) + " in " + plural(m.calls, "call"); }));
			sec.appendChild(el("h3", null, "Bandwidth per module (bytes / GPU time, where every call was timed)"));
			sec.appendChild(chart("nccl-mod-bw", mods, modLabel,
				function (m) { return m.timed_calls === m.calls && m.time_ns > 0 ? m.bytes / m.time_ns : 0; },
				function (m) {
					return m.timed_calls === m.calls && m.time_ns > 0 ? (m.bytes / m.time_ns).toFixed(3) + " GB/s"
						: m.timed_calls + " of " + m.calls + " calls timed";
				}, true));
		}
		return sec;
	}

	add(app, header());
	if (ranks)
		app.appendChild(postmortem());
	if (counts)
		app.appendChild(countsSection());
	if (tree)
		app.appendChild(treeSection());
	if (nccl && nccl.nccl)
		app.appendChild(ncclSection());
	app.appendChild(el("footer", null, "Made by " + (meta.generator || "commdebug") + " from " +
		(meta.traces || []).join(", ") + ". Self-contained: no network."));
	app.setAttribute("data-region", meta.region);
	document.documentElement.setAttribute("data-ready", "1");
})();
