// sera view: draws rollout trees from the JSON blocks embedded in this page.
// All model text reaches the page through textContent (never as markup): it is untrusted.
// Trees are parsed when opened, and a node's details are built the first time it is expanded,
// so pages with hundreds of agents and megabytes of text open quickly.
"use strict";
(function () {
  // -- small helpers ---------------------------------------------------------------------------

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function add(parent) {
    for (var i = 1; i < arguments.length; i++) {
      var kid = arguments[i];
      if (kid === null || kid === undefined) continue;
      parent.appendChild(typeof kid === "string" ? document.createTextNode(kid) : kid);
    }
    return parent;
  }

  function block(id) {
    var holder = document.getElementById(id);
    return holder ? JSON.parse(holder.textContent) : null;
  }

  function firstLine(text, max) {
    var line = String(text || "").split("\n", 1)[0];
    return line.length > max ? line.slice(0, max - 1) + "\u2026" : line;
  }

  function tokens(n) {
    if (!n) return "0";
    return n >= 10000 ? (n / 1000).toFixed(0) + "k" : n >= 1000 ? (n / 1000).toFixed(1) + "k" : String(n);
  }

  function seconds(s) {
    if (s === null || s === undefined) return "\u2013";
    if (s < 1) return (s * 1000).toFixed(0) + " ms";
    if (s < 120) return s.toFixed(1) + " s";
    return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  }

  function score(x) {
    return x === null || x === undefined ? "\u2013" : Number(x).toFixed(3).replace(/\.?0+$/, "") || "0";
  }

  // ok / fail / unknown from a boolean (null or undefined: unknown).
  function badge(value, title) {
    var b = el("span", "badge " + (value === true ? "ok" : value === false ? "fail" : "unk"),
      value === true ? "\u2713" : value === false ? "\u2717" : "?");
    if (title) b.title = title;
    return b;
  }

  function chip(text, cls, title) {
    var c = el("span", "chip" + (cls ? " " + cls : ""), text);
    if (title) c.title = title;
    return c;
  }

  function facts(rows) {
    var dl = el("dl", "facts");
    rows.forEach(function (row) {
      if (row[1] === null || row[1] === undefined || row[1] === "") return;
      add(dl, el("dt", null, row[0]));
      var dd = el("dd", row[2] || null);
      add(dd, typeof row[1] === "object" ? row[1] : String(row[1]));
      add(dl, dd);
    });
    return dl;
  }

  // A <details> whose body is built only when first opened.
  function lazyDetails(summary, build) {
    var d = el("details");
    add(d, el("summary", null, summary));
    var built = false;
    d.addEventListener("toggle", function () {
      if (d.open && !built) { built = true; build(d); }
    });
    return d;
  }

  function json(value) {
    return JSON.stringify(value, null, 2);
  }

  // -- the page --------------------------------------------------------------------------------

  var page = block("sera-page");
  var app = document.getElementById("app");
  app.textContent = "";
  var treeHost = el("section", "tree-host");
  var indexRows = [];

  add(app, el("h1", null, page.title));
  add(app, el("div", "muted small", page.source + " \u00b7 " + ({ tree: "one rollout tree", eval: "evaluation run", train: "training run", folder: "folder of trees" }[page.kind] || page.kind)));
  var info = Object.keys(page.run_info || {});
  if (info.length) {
    var kv = el("div", "kv small");
    info.forEach(function (k) { var s = el("span"); add(s, el("b", null, k + ": "), String(page.run_info[k])); add(kv, s); });
    add(app, kv);
  }
  if (page.kind !== "tree") add(app, buildIndex(page.entries));
  add(app, treeHost);

  function buildIndex(entries) {
    var box = el("section", "index-box");
    var readable = entries.filter(function (e) { return e.block !== null; });
    var wins = readable.filter(function (e) { return e.success === true; }).length;
    add(box, el("h2", null, "Trees (" + entries.length + ")"));
    add(box, el("div", "muted small", wins + " of " + readable.length + " embedded trees succeeded" +
      (entries.length > readable.length ? "; " + (entries.length - readable.length) + " not shown (unreadable or over the size limit)" : "")));
    var tools = el("div", "tools");
    var filter = el("input"); filter.type = "search"; filter.placeholder = "filter by file, task or root goal";
    filter.id = "index-filter";
    var failures = el("input"); failures.type = "checkbox"; failures.id = "only-failures";
    var failLabel = el("label"); add(failLabel, failures, " failures only");
    add(tools, filter, failLabel);
    add(box, tools);
    var steps = entries.some(function (e) { return e.step !== null; });
    var table = el("table", "index");
    var head = el("tr");
    ["file"].concat(steps ? ["step"] : []).concat(["task", "seed", "success", "agents", "depth", "calls", "tokens", "wall", "forks", "root goal / problem"]).forEach(function (h) {
      add(head, el("th", ["agents", "depth", "calls", "tokens", "wall", "forks"].indexOf(h) >= 0 ? "num" : null, h));
    });
    add(table, add(el("thead"), head));
    var body = el("tbody");
    entries.forEach(function (e) {
      var tr = el("tr", e.unreadable ? "unreadable" : e.skipped ? "skipped" : "entry");
      add(tr, el("td", null, e.path));
      if (steps) add(tr, el("td", "num", e.step === null ? "" : e.step));
      if (e.unreadable) {
        var td = el("td", null, "unreadable: " + e.unreadable); td.colSpan = 11; add(tr, td);
      } else {
        var ok = el("td"); add(ok, badge(e.success));
        add(tr, el("td", null, e.task_id), el("td", null, e.seed === null ? "" : e.seed), ok,
          el("td", "num", e.agents), el("td", "num", e.depth), el("td", "num", e.policy_calls),
          el("td", "num", tokens(e.tokens)), el("td", "num", seconds(e.wall_time_s)), el("td", "num", e.fork_groups));
        var goal = el("td", "goal", e.skipped ? e.skipped : e.error ? "error: " + firstLine(e.error, 160) : firstLine(e.goal, 160));
        goal.title = e.goal;
        add(tr, goal);
        if (e.block !== null) {
          tr.tabIndex = 0;
          tr.addEventListener("click", function () { openTree(e.block, tr); });
          tr.addEventListener("keydown", function (ev) { if (ev.key === "Enter") openTree(e.block, tr); });
        }
      }
      tr.dataset.search = (e.path + "\n" + e.task_id + "\n" + e.goal).toLowerCase();
      tr.dataset.failed = e.unreadable || e.success !== true ? "1" : "0";
      indexRows.push(tr);
      add(body, tr);
    });
    add(table, body);
    add(box, table);
    function refilter() {
      var q = filter.value.trim().toLowerCase();
      indexRows.forEach(function (tr) {
        tr.hidden = (q && tr.dataset.search.indexOf(q) < 0) || (failures.checked && tr.dataset.failed !== "1");
      });
    }
    filter.addEventListener("input", refilter);
    failures.addEventListener("change", refilter);
    return box;
  }

  // -- one tree --------------------------------------------------------------------------------

  var current = null; // the open tree's state

  function openTree(blockIndex, row) {
    var data = block("sera-tree-" + blockIndex);
    indexRows.forEach(function (tr) { tr.classList.remove("current"); });
    if (row) row.classList.add("current");
    treeHost.textContent = "";
    current = new TreeState(data);
    add(treeHost, current.render());
    if (row) treeHost.scrollIntoView({ block: "start" });
    if (history.replaceState) history.replaceState(null, "", "#tree=" + blockIndex);
    document.body.dataset.rendered = String(blockIndex);
    document.body.dataset.renderedMs = performance.now().toFixed(1); // for benchmarks/viewer_load.py
  }

  function TreeState(data) {
    this.data = data;
    this.byId = {};
    this.views = {}; // node id -> {wrap, row, detail, kids, twisty, built, kidsBuilt}
    this.groups = {};
    var self = this;
    data.nodes.forEach(function (n) { self.byId[n.id] = n; });
    data.groups.forEach(function (g) { self.groups[g.id] = g; });
  }

  TreeState.prototype.render = function () {
    var d = this.data, self = this;
    var box = el("section", "tree-view");
    var root = this.byId[d.root_id];
    var title = el("h2");
    add(title, badge(d.root_success, "verified success of the task"), " ", d.task_id);
    add(box, title);
    var kv = el("div", "kv small");
    [["env", d.env], ["seed", d.seed], ["policy version", d.policy_version], ["agents", d.live_agents + " live / " + d.nodes.length + " recorded"],
     ["depth", d.depth], ["wall time", seconds(d.wall_time_s)], ["fork groups", d.groups.length],
     ["started", d.started_at ? new Date(d.started_at * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC" : null]].forEach(function (p) {
      if (p[1] === null || p[1] === undefined) return;
      var s = el("span"); add(s, el("b", null, p[0] + ": "), String(p[1])); add(kv, s);
    });
    add(box, kv);
    if (d.error) add(box, el("div", "errtext", "rollout error: " + d.error));
    var counters = Object.keys(d.counters || {});
    if (counters.length) {
      add(box, lazyDetails("usage counters (" + counters.length + ")", function (holder) {
        var t = el("table", "rubric");
        counters.forEach(function (k) { add(t, add(el("tr"), el("td", null, k), el("td", "num", d.counters[k]))); });
        add(holder, t);
      }));
    }
    if (d.groups.length) {
      add(box, lazyDetails("fork groups (" + d.groups.length + ")", function (holder) {
        d.groups.forEach(function (g) { add(holder, self.groupBox(g)); });
      }));
    }

    var tools = el("div", "tools");
    var search = el("input"); search.type = "search"; search.placeholder = "search goals"; search.id = "goal-search";
    var status = el("span", "muted small");
    var expand = el("button", null, "expand all"), collapse = el("button", null, "collapse all");
    var dead = el("input"); dead.type = "checkbox"; dead.checked = true; dead.id = "show-uncommitted";
    var deadLabel = el("label", "small"); add(deadLabel, dead, " show uncommitted branches");
    add(tools, search, expand, collapse, deadLabel, status);
    if (page.kind !== "tree") {
      var back = el("button", null, "\u2191 index");
      back.addEventListener("click", function () { app.scrollIntoView({ block: "start" }); });
      add(tools, back);
    }
    add(box, tools);

    var tree = el("div", "tree");
    this.treeEl = tree;
    add(tree, this.nodeEl(root));
    this.openKids(root.id, true);
    add(box, tree);

    expand.addEventListener("click", function () { self.expandAll(); });
    collapse.addEventListener("click", function () { self.collapseAll(); });
    dead.addEventListener("change", function () { tree.classList.toggle("hide-dead", !dead.checked); });
    var timer = null;
    search.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { status.textContent = self.search(search.value); }, 120);
    });
    return box;
  };

  // The row of one agent; its details and children are built on first expand.
  TreeState.prototype.nodeEl = function (n) {
    var self = this;
    var wrap = el("div", "node" + (n.live ? "" : " dead") + (n.group_id ? " branch" : ""));
    wrap.dataset.id = n.id;
    var row = el("div", "row");
    row.tabIndex = 0;
    var twisty = el("button", "twisty" + (n.child_ids.length ? "" : " leaf"), "\u25b8");
    twisty.title = n.child_ids.length + " children";
    var success = n.verified_success !== null ? n.verified_success : n.judged_success;
    var goal = el("span", "goal", n.goal.replace(/\s+/g, " ").slice(0, 400));
    goal.title = n.goal;
    var chips = el("span", "chips");
    add(chips, chip(n.steps.length + "/" + n.budget + " steps"),
      chip(tokens(n.prompt_tokens + n.completion_tokens) + " tok", null, "prompt " + n.prompt_tokens + " + completion " + n.completion_tokens + " (rubric calls: " + n.call_tokens + ")"),
      n.wall_s === null ? null : chip(seconds(n.wall_s), null, "wall time (policy " + seconds(n.policy_s) + ", actions " + seconds(n.env_s) + ")"));
    if (n.assessment && n.assessment.score !== null) chips.appendChild(chip("rubric " + score(n.assessment.score), "score", "rubric score (gate " + (n.assessment.gate === null ? "unknown" : n.assessment.gate ? "passed" : "failed") + ")"));
    if (n.group_id !== null) {
      chips.appendChild(n.committed
        ? chip("committed branch " + n.branch_index + " of " + n.group_id, "committed")
        : chip("uncommitted branch " + n.branch_index + " of " + n.group_id, "uncommitted", "this branch's end state was not committed: it never happened for the parent"));
    } else if (!n.live) {
      chips.appendChild(chip("under an uncommitted branch", "uncommitted"));
    }
    if (n.error || n.env_error) chips.appendChild(chip("error", "err", n.error || n.env_error));
    add(row, twisty, badge(success, n.verified_success !== null ? "verified" : n.judged_success !== null ? "judged" : "no verdict"),
      el("span", "nid", n.id + " \u00b7 d" + n.depth), goal, chips);
    var detail = el("div", "detail"); detail.hidden = true;
    var kids = el("div", "kids"); kids.hidden = true;
    add(wrap, row, detail, kids);
    this.views[n.id] = { wrap: wrap, row: row, detail: detail, kids: kids, twisty: twisty, built: false, kidsBuilt: false };
    twisty.addEventListener("click", function (ev) { ev.stopPropagation(); self.toggleKids(n.id); });
    row.addEventListener("click", function () { self.toggleDetail(n.id); });
    row.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter") self.toggleDetail(n.id);
      else if (ev.key === "ArrowRight") self.openKids(n.id, true);
      else if (ev.key === "ArrowLeft") self.openKids(n.id, false);
    });
    return wrap;
  };

  TreeState.prototype.openKids = function (id, open) {
    var v = this.views[id], n = this.byId[id], self = this;
    if (!v || !n.child_ids.length) return;
    if (open && !v.kidsBuilt) {
      v.kidsBuilt = true;
      n.child_ids.forEach(function (cid) { if (self.byId[cid]) v.kids.appendChild(self.nodeEl(self.byId[cid])); });
    }
    v.kids.hidden = !open;
    v.twisty.textContent = open ? "\u25be" : "\u25b8";
  };

  TreeState.prototype.toggleKids = function (id) {
    this.openKids(id, this.views[id].kids.hidden);
  };

  TreeState.prototype.openDetail = function (id, open) {
    var v = this.views[id];
    if (open && !v.built) { v.built = true; this.fillDetail(this.byId[id], v.detail); }
    v.detail.hidden = !open;
    v.wrap.classList.toggle("open", open);
  };

  TreeState.prototype.toggleDetail = function (id) {
    this.openDetail(id, this.views[id].detail.hidden);
  };

  // Render every ancestor of `id` so its row exists, open them, then show the row.
  TreeState.prototype.reveal = function (id, openDetail) {
    var chain = [], n = this.byId[id];
    while (n) { chain.unshift(n.id); n = n.parent_id !== null ? this.byId[n.parent_id] : null; }
    for (var i = 0; i < chain.length - 1; i++) this.openKids(chain[i], true);
    var v = this.views[id];
    if (!v) return;
    if (!this.byId[id].live) { var box = document.getElementById("show-uncommitted"); if (box && !box.checked) box.click(); }
    if (openDetail) this.openDetail(id, true);
    v.row.scrollIntoView({ block: "center" });
    v.wrap.classList.remove("flash"); void v.wrap.offsetWidth; v.wrap.classList.add("flash");
  };

  TreeState.prototype.link = function (id) {
    var self = this, b = el("button", "nlink", id);
    b.title = "show agent " + id;
    b.addEventListener("click", function (ev) { ev.stopPropagation(); self.reveal(id, true); });
    return b;
  };

  TreeState.prototype.expandAll = function () {
    var self = this; // creation order: a parent's row exists (and opens) before its children's
    this.data.nodes.forEach(function (n) { self.openKids(n.id, true); });
  };

  TreeState.prototype.collapseAll = function () {
    var self = this;
    Object.keys(this.views).forEach(function (id) { self.openKids(id, false); self.openDetail(id, false); });
  };

  TreeState.prototype.search = function (text) {
    var q = text.trim().toLowerCase(), self = this;
    Object.keys(this.views).forEach(function (id) { self.views[id].wrap.classList.remove("hit", "onpath"); });
    if (!q) { this.treeEl.classList.remove("filtering"); return ""; }
    var hits = this.data.nodes.filter(function (n) { return n.goal.toLowerCase().indexOf(q) >= 0; });
    hits.forEach(function (n) {
      var p = n.parent_id;
      while (p !== null && self.byId[p]) { self.openKids(p, true); p = self.byId[p].parent_id; }
    });
    hits.forEach(function (n) {
      self.views[n.id].wrap.classList.add("hit");
      var p = n.parent_id;
      while (p !== null && self.byId[p]) { self.views[p].wrap.classList.add("onpath"); p = self.byId[p].parent_id; }
    });
    this.treeEl.classList.add("filtering");
    return hits.length + " of " + this.data.nodes.length + " agents match";
  };

  // -- node details ----------------------------------------------------------------------------

  TreeState.prototype.fillDetail = function (n, box) {
    var self = this;
    add(box, el("div", "goaltext", n.goal));
    var verdicts = el("span");
    add(verdicts, "verifier ", badge(n.verified_success), "  judge ", badge(n.judged_success));
    var parent = null;
    if (n.parent_id !== null) { parent = el("span"); add(parent, this.link(n.parent_id), " step " + n.fork_step); }
    var branch = null;
    if (n.group_id !== null) {
      branch = el("span", null, "branch " + n.branch_index + " of fork group " + n.group_id + " \u2014 " +
        (n.committed ? "committed" : "NOT committed (its end state never reached the parent)"));
    }
    add(box, facts([
      ["outcome", verdicts],
      ["judge reason", n.judge_reason],
      ["finished with", n.finish_message],
      ["error", n.error, "errtext"],
      ["environment error", n.env_error, "errtext"],
      ["bounds hit", n.bounds_hit.join("\n")],
      ["launched by", parent],
      ["fork group", branch],
      ["steps", n.steps.length + " of " + n.budget],
      ["tokens", "prompt " + n.prompt_tokens + ", completion " + n.completion_tokens + (n.call_tokens ? "; rubric/score calls " + n.call_tokens : "")],
      ["time", "wall " + seconds(n.wall_s) + ", policy " + seconds(n.policy_s) + ", actions " + seconds(n.env_s)],
      ["no training data", n.skip_reason],
    ]));
    if (n.rubric) add(box, this.rubricBox(n.rubric, n.assessment, n.group_id !== null ? "rubric of fork group " + n.group_id + ", applied to this branch" : "frozen rubric written by " + n.parent_id + ", applied to this agent"));
    else if (n.assessment) add(box, el("div", "small", "rubric score " + score(n.assessment.score) + " (no rubric stored)"));
    n.calls.forEach(function (c) { add(box, self.callLine(c)); });
    add(box, lazyDetails("initial prompt", function (holder) {
      if (n.system_prompt !== null) { add(holder, el("div", "label", "system")); add(holder, el("pre", null, self.data.texts[n.system_prompt])); }
      add(holder, el("div", "label", "user"), el("pre", null, n.first_prompt));
    }));
    var steps = el("div", "steps");
    if (!n.steps.length) add(steps, el("div", "muted small", "no steps"));
    n.steps.forEach(function (s) { add(steps, self.stepEl(n, s)); });
    add(box, el("h3", null, "steps"), steps);
    if (Object.keys(n.final_state).length) add(box, lazyDetails("final state", function (h) { add(h, el("pre", null, json(n.final_state))); }));
    if (Object.keys(n.verifier_info).length) add(box, lazyDetails("verifier", function (h) { add(h, el("pre", null, json(n.verifier_info))); }));
  };

  TreeState.prototype.stepEl = function (n, s) {
    var self = this;
    var box = el("div", "step");
    box.dataset.step = String(s.index);
    var head = el("div", "step-head");
    add(head, el("b", null, "step " + s.index), " \u00b7 " + s.kind + (s.tag ? " / " + s.tag : ""),
      " \u00b7 " + s.prompt_tokens + "+" + s.completion_tokens + " tok \u00b7 policy " + seconds(s.policy_s) + " \u00b7 action " + seconds(s.env_s));
    if (s.finish_reason && s.finish_reason !== "stop") add(head, chip("stopped: " + s.finish_reason, "err"));
    if (s.forced) add(head, chip("forced by the environment: " + s.forced, "forced"));
    if (s.prompt_rewritten) add(head, chip("prompt rewritten by the sampler"));
    if (s.error) add(head, chip("error", "err"));
    add(box, head);
    if (s.thought) add(box, el("div", "thought", s.thought));
    if (s.body) add(box, el("div", "label", s.kind === "code" ? "code" : (s.tag || "action")), el("pre", "code", s.body));
    if (s.raw !== null) add(box, el("div", "label", "raw reply"), el("pre", "raw", s.raw));
    if (s.parse_error) add(box, el("div", "errtext", "parse error: " + s.parse_error));
    if (s.error) add(box, el("div", "errtext", "error: " + s.error));
    if (s.observation) add(box, el("div", "label", "observation"), el("pre", "obs", s.observation));
    var inGroups = {};
    s.group_ids.forEach(function (gid) { var g = self.groups[gid]; if (g) g.branches.forEach(function (b) { inGroups[b.node_id] = true; }); });
    s.child_ids.forEach(function (cid) { if (!inGroups[cid] && self.byId[cid]) add(box, self.delegationLine(self.byId[cid])); });
    s.group_ids.forEach(function (gid) { if (self.groups[gid]) add(box, self.groupBox(self.groups[gid])); });
    return box;
  };

  // One delegated child as its parent's step shows it: goal, outcome, rubric score and gate.
  TreeState.prototype.delegationLine = function (c) {
    var self = this;
    var line = el("div", "delegation");
    add(line, "delegated to ", this.link(c.id), " ", badge(c.verified_success !== null ? c.verified_success : c.judged_success), " ");
    if (c.assessment) {
      add(line, chip("rubric " + score(c.assessment.score), "score"),
        el("span", "gate " + (c.assessment.gate === true ? "ok" : c.assessment.gate === false ? "fail" : ""),
          " gate " + (c.assessment.gate === true ? "passed" : c.assessment.gate === false ? "failed" : "unknown")));
    }
    add(line, el("div", null, firstLine(c.goal, 300)));
    if (c.rubric) add(line, lazyDetails("frozen rubric and " + c.id + "'s scores", function (h) { add(h, self.rubricBox(c.rubric, c.assessment, null)); }));
    return line;
  };

  TreeState.prototype.rubricBox = function (r, a, caption) {
    var box = el("div", "rubric-box");
    if (caption) add(box, el("div", "label", caption));
    if (r.raw !== null) { add(box, el("div", "small", "stored rubric (not in the published schema):"), el("pre", null, r.raw)); }
    if (r.criteria.length) {
      var t = el("table", "rubric");
      add(t, add(el("tr"), el("th", null, "criterion"), el("th", null, "weight"), el("th", null, "score"), el("th", null, "weighted"), el("th", null, "description")));
      var total = 0, scored = false;
      r.criteria.forEach(function (c) {
        var w = c.weight, s = c.score, ws = w !== null && s !== null ? w * s : null;
        if (ws !== null) { total += ws; scored = true; }
        var desc = el("td", "desc");
        add(desc, c.description);
        if (c.score_0 || c.score_full) add(desc, el("div", "muted small", "0: " + c.score_0 + "  \u00b7  full: " + c.score_full));
        add(t, add(el("tr"), el("td", null, c.name), el("td", "num", score(w)), el("td", "num", score(s)), el("td", "num", score(ws)), desc));
      });
      if (scored) add(t, add(el("tr"), el("th", null, "sum"), el("td"), el("td"), el("th", "num", score(total)), el("td", "muted small", "before the gate")));
      add(box, t);
    }
    if (a) {
      var gate = el("span", "gate " + (a.gate === true ? "ok" : a.gate === false ? "fail" : ""), a.gate === true ? "passed" : a.gate === false ? "failed" : "unknown");
      add(box, facts([
        ["success gate", gate],
        ["rubric score", score(a.score)],
        ["scorer's final", a.model_final === null ? null : score(a.model_final)],
        ["scorer's reason", a.reason],
        ["scores for unknown names", Object.keys(a.unmatched).length ? json(a.unmatched) : null],
      ]));
    }
    add(box, facts([
      ["gate condition", r.success_gate],
      ["failure conditions", r.failure_conditions.length ? r.failure_conditions.map(function (x) { return "\u2022 " + x; }).join("\n") : null],
      ["scoring procedure", r.scoring_procedure],
      ["rubric sha256", r.hash, "hash"],
    ]));
    return box;
  };

  TreeState.prototype.callLine = function (c) {
    var line = el("div", "small muted", (c.role === "rubric" ? "rubric writing" : "rubric scoring") + " call: " +
      c.prompt_tokens + "+" + c.completion_tokens + " tok" + (c.external ? " (external model)" : ""));
    if (c.error) add(line, el("div", "errtext", "failed: " + c.error));
    if (c.reply !== null && c.reply !== "") add(line, el("pre", "raw", c.reply));
    return line;
  };

  TreeState.prototype.groupBox = function (g) {
    var self = this;
    var box = el("div", "group");
    box.dataset.group = g.id;
    var head = el("div");
    var kind = g.kind === "best_of" ? "best-of-" + g.branches.length + (g.selector ? ", selector " + g.selector : "") : g.kind;
    add(head, el("b", null, "fork group " + g.id), kind ? chip(kind) : null,
      " \u00b7 " + g.branches.length + " branches from ", this.link(g.parent_id), " step " + g.parent_step,
      " \u00b7 committed: " + (g.committed_branch === null ? "none" : "branch " + g.committed_branch));
    if (g.merge_conflicts) add(head, chip(g.merge_conflicts + " merge conflicts", "err"));
    add(box, head);
    add(box, el("div", "small", firstLine(g.child_goal, 300)));
    if (g.selection || g.temperature !== null) {
      add(box, el("div", "small", [g.selection ? "selection: " + g.selection : "", g.temperature !== null ? "candidates at temperature " + g.temperature : ""].filter(Boolean).join(" \u00b7 ")));
    }
    if (g.state_digest) add(box, el("div", "hash", "start state sha256 " + g.state_digest));
    if (g.rubric_error) add(box, el("div", "errtext", "no usable rubric: " + g.rubric_error));
    g.calls.forEach(function (c) { add(box, self.callLine(c)); });
    var names = g.rubric ? g.rubric.criteria.map(function (c) { return c.name; }) : [];
    var t = el("table", "branches");
    var hr = el("tr");
    ["branch", "agent", "committed", "label", "rubric score", "gate"].concat(names).concat(["problem"]).forEach(function (h) { add(hr, el("th", null, h)); });
    add(t, hr);
    g.branches.forEach(function (b) {
      var tr = el("tr", b.committed ? "committed-row" : "uncommitted-row");
      var agent = el("td"); add(agent, self.link(b.node_id));
      var committed = el("td"); add(committed, b.committed ? chip("\u2605 committed", "committed") : chip("uncommitted", "uncommitted"));
      var label = el("td"); add(label, badge(b.label), b.label_source ? " " + b.label_source : "");
      var gate = b.assessment ? b.assessment.gate : null;
      add(tr, el("td", "num", b.index), agent, committed, label, el("td", "num", score(b.rubric_score)),
        el("td", "gate " + (gate === true ? "ok" : gate === false ? "fail" : ""), gate === true ? "passed" : gate === false ? "failed" : "\u2013"));
      names.forEach(function (name) { add(tr, el("td", "num", score(b.criterion_scores[name] === undefined ? null : b.criterion_scores[name]))); });
      add(tr, el("td", "errtext", [b.label_error, b.score_error].filter(Boolean).join("; ")));
      add(t, tr);
    });
    add(box, t);
    if (g.rubric) add(box, lazyDetails("the group's rubric", function (h) { add(h, self.rubricBox(g.rubric, null, null)); }));
    return box;
  };

  // -- start -----------------------------------------------------------------------------------

  var wanted = /^#tree=(\d+)$/.exec(location.hash);
  var first = page.entries.filter(function (e) { return e.block !== null; })[0];
  if (page.kind === "tree") openTree(first.block, null);
  else if (wanted && document.getElementById("sera-tree-" + wanted[1])) {
    openTree(Number(wanted[1]), indexRows.filter(function (tr, i) { return page.entries[i].block === Number(wanted[1]); })[0] || null);
  }
  document.body.dataset.readyMs = performance.now().toFixed(1); // since navigation start
  document.body.dataset.ready = "1";
})();
