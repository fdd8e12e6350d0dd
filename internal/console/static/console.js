// fencegate console: live feed and countdowns. The pages work without
// this file; it only keeps them current. No inline script, no eval, no
// innerHTML: rows are built with textContent.
(function () {
  "use strict";
  var body = document.body;
  var skew = Number(body.dataset.now || Date.now()) - Date.now();
  function now() { return Date.now() + skew; }

  function remaining(ms) {
    var d = ms - now();
    if (d <= 0) { return "expired"; }
    if (d < 60000) { return (d / 1000).toFixed(1) + "s"; }
    var s = Math.round(d / 1000);
    return Math.floor(s / 60) + "m" + (s % 60) + "s";
  }
  function tick() {
    var els = document.querySelectorAll("[data-expires]");
    for (var i = 0; i < els.length; i++) {
      els[i].textContent = remaining(Number(els[i].dataset.expires));
    }
  }
  tick();
  setInterval(tick, 250);

  function cell(tr, text, cls) {
    var td = document.createElement("td");
    if (cls) { td.className = cls; }
    td.textContent = text == null ? "" : String(text);
    tr.appendChild(td);
    return td;
  }
  function keyCell(tr, row) {
    var td = cell(tr, "", "key");
    if (row.link) {
      var a = document.createElement("a");
      a.href = row.link;
      a.textContent = row.key;
      td.appendChild(a);
    } else {
      td.textContent = row.key;
    }
  }

  function renderLocks(data) {
    var tbody = document.querySelector("#locks tbody");
    if (!tbody) { return; }
    skew = Number(data.nowMs) - Date.now();
    var rows = data.locks || [];
    var frag = document.createDocumentFragment();
    rows.forEach(function (l) {
      var tr = document.createElement("tr");
      tr.dataset.keyHash = l.keyHash;
      keyCell(tr, l);
      cell(tr, l.fence, "fence");
      cell(tr, l.lockIdHash, "hash");
      var cd = cell(tr, remaining(l.expiresAtMs), "countdown");
      cd.dataset.expires = l.expiresAtMs;
      cell(tr, l.acquiredAt, "time");
      frag.appendChild(tr);
    });
    tbody.replaceChildren(frag);
    var count = document.getElementById("lock-count");
    if (count) { count.textContent = String(rows.length); }
    var empty = document.getElementById("locks-empty");
    if (empty) { empty.hidden = rows.length > 0; }
  }

  function shown(d) { return 'tr[data-id="' + CSS.escape(d.decisionId) + '"]'; }

  function addDenial(d) {
    if (body.dataset.keyHash) {
      // A timeline: a new denial of this key means new history.
      if (d.keyHash === body.dataset.keyHash && !document.querySelector(shown(d))) { location.reload(); }
      return;
    }
    var tbody = document.querySelector("#denials tbody");
    if (!tbody || tbody.querySelector(shown(d))) { return; }
    var tr = document.createElement("tr");
    tr.dataset.id = d.decisionId;
    tr.className = "fresh";
    cell(tr, d.time, "time");
    var r = cell(tr, d.reason, "reason reason-" + d.reason);
    if (d.mode && d.mode !== "enforce") {
      var sm = document.createElement("small");
      sm.textContent = " (" + d.mode + ")";
      r.appendChild(sm);
    }
    cell(tr, d.presented, "fence");
    cell(tr, d.current, "fence");
    keyCell(tr, d);
    cell(tr, d.route);
    cell(tr, d.request, "req");
    cell(tr, d.peer);
    cell(tr, d.decisionId, "hash");
    tbody.insertBefore(tr, tbody.firstChild);
    while (tbody.rows.length > 200) { tbody.deleteRow(-1); }
    var empty = document.getElementById("denials-empty");
    if (empty) { empty.hidden = true; }
  }

  var url = body.dataset.stream;
  if (url && window.EventSource) {
    var sep = url.indexOf("?") < 0 ? "?" : "&";
    var es = new EventSource(url + sep + "since=" + (Number(body.dataset.now) - 10000));
    var live = document.getElementById("live");
    es.addEventListener("open", function () { if (live) { live.hidden = false; } });
    es.addEventListener("error", function () { if (live) { live.hidden = true; } });
    es.addEventListener("locks", function (e) { renderLocks(JSON.parse(e.data)); });
    es.addEventListener("denial", function (e) { addDenial(JSON.parse(e.data)); });
  }
}());
