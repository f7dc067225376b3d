// The web UI's one script: it asks before an action (dialog#confirm),
// applies the overview's filter without a reload, and keeps the page live:
// on a change of the server-sent event stream it refetches the page's own
// URL (only <main>, header X-Fragment: 1) and swaps it in, at most once
// per 250 ms. Without it every page still works (a confirmation page, a
// filter button, a reload).
"use strict";
(function () {
  var body = document.body;
  var self = body.getAttribute("data-self") || "";
  if (self.charAt(0) !== "/" || self.charAt(1) === "/" || self.charAt(1) === "\\") {
    self = location.pathname + location.search; // only a path of this origin
  }
  if (self !== location.pathname + location.search) {
    // A POST's answer shows the page it acted on: make the address that page.
    history.replaceState(null, "", self);
  }

  // Confirmation of actions.
  var dialog = document.getElementById("confirm");
  var pending = null;
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    var question = form.getAttribute("data-confirm");
    if (!question || form.querySelector("input[name=confirm]")) return;
    if (!dialog || typeof dialog.showModal !== "function") return; // the server asks instead
    ev.preventDefault();
    pending = form;
    document.getElementById("confirm-text").textContent = question;
    dialog.returnValue = "";
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
  });
  if (dialog) {
    dialog.addEventListener("close", function () {
      var form = pending;
      pending = null;
      if (!form || dialog.returnValue !== "ok") return;
      // A live refresh may have replaced <main> while the dialog was open:
      // a form no longer in the document would not submit.
      if (!form.isConnected) { form.hidden = true; document.body.appendChild(form); }
      var input = document.createElement("input");
      input.type = "hidden";
      input.name = "confirm";
      input.value = "yes";
      form.appendChild(input);
      form.submit();
    });
  }

  // focusKey is a selector that finds el again in a fresh <main>: its id,
  // else what names an action button (data-action, data-entry), a link
  // (href) or a tree node's YAML toggle (its node's data-object), so that
  // a keyboard user's focus survives a live refresh; "" when nothing names
  // it.
  function focusKey(el) {
    var tag = el.tagName.toLowerCase();
    if (el.id) return "#" + CSS.escape(el.id);
    var action = el.getAttribute("data-action");
    if (tag === "button" && action) {
      var key = 'button[data-action="' + CSS.escape(action) + '"]';
      var entry = el.getAttribute("data-entry");
      return entry ? key + '[data-entry="' + CSS.escape(entry) + '"]' : key;
    }
    var href = el.getAttribute("href");
    if (tag === "a" && href) return 'a[href="' + CSS.escape(href) + '"]';
    var node = el.closest("[data-object]");
    if (tag === "summary" && node) return '[data-object="' + CSS.escape(node.getAttribute("data-object")) + '"] > details > summary';
    return "";
  }

  // Swapping <main> for the server's fresh fragment.
  function swap(html) {
    var main = document.getElementById("main");
    // Keep open <details> and the focused filter across the swap.
    var open = {};
    main.querySelectorAll("details[open]").forEach(function (d) {
      var li = d.closest("[data-object]");
      if (li) open[li.getAttribute("data-object")] = true;
    });
    var active = document.activeElement && main.contains(document.activeElement) ? focusKey(document.activeElement) : "";
    var caret = active && document.activeElement.selectionStart;
    main.innerHTML = html;
    main.querySelectorAll("[data-object]").forEach(function (li) {
      var d = li.querySelector(":scope > details");
      if (d && open[li.getAttribute("data-object")]) d.open = true;
    });
    if (active) {
      var el = main.querySelector(active);
      if (el) { el.focus(); if (caret != null && el.setSelectionRange) { try { el.setSelectionRange(caret, caret); } catch (e) {} } }
    }
    body.setAttribute("data-refreshed", String(Date.now()));
  }

  // A click is a press and a release on one element: a swap between the
  // two would put the release on a new element and lose the click (the
  // operator writes a status while one clicks). A fragment that comes
  // within 10 s of a press waits for its release; one after that, from a
  // press never released, is swapped in.
  var pressedAt = 0, held = null;
  document.addEventListener("pointerdown", function () { pressedAt = Date.now(); }, true);
  function release() {
    pressedAt = 0;
    if (held === null) return;
    var html = held;
    held = null;
    setTimeout(function () { if (!pressedAt) swap(html); else held = html; }, 0); // after the click the release makes
  }
  document.addEventListener("pointerup", release, true);
  document.addEventListener("pointercancel", release, true);
  window.addEventListener("blur", release);

  var busy = false, again = false, last = 0, timer = null;
  function refresh() {
    if (busy) { again = true; return; }
    var wait = 250 - (Date.now() - last);
    if (wait > 0) {
      if (!timer) timer = setTimeout(function () { timer = null; refresh(); }, wait);
      return;
    }
    busy = true;
    last = Date.now();
    fetch(self, { headers: { "X-Fragment": "1" }, credentials: "same-origin" })
      .then(function (r) {
        if (r.status === 401 || r.redirected) { location.reload(); return null; }
        return r.text();
      })
      .then(function (html) {
        if (html === null) return;
        if (pressedAt && Date.now() - pressedAt < 10000) { held = html; return; }
        held = null;
        swap(html);
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  // The overview's filter, applied as it changes.
  var typing = null;
  function applyFilter(form) {
    var params = new URLSearchParams(new FormData(form));
    params.forEach(function (v, k) { if (!v) params.delete(k); });
    var q = params.toString();
    self = "/" + (q ? "?" + q : "");
    history.replaceState(null, "", self);
    last = 0;
    refresh();
  }
  document.addEventListener("input", function (ev) {
    var form = ev.target.form;
    if (!form || form.id !== "filters") return;
    clearTimeout(typing);
    typing = setTimeout(function () { applyFilter(form); }, 200);
  });
  document.addEventListener("submit", function (ev) {
    if (ev.target.id !== "filters") return;
    ev.preventDefault();
    applyFilter(ev.target);
  });

  // Relative times ("5m ago") stay true on a page left open.
  function ago(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + "s ago";
    if (s < 3600) return Math.floor(s / 60) + "m ago";
    if (s < 172800) return Math.floor(s / 3600) + "h ago";
    return Math.floor(s / 86400) + "d ago";
  }
  setInterval(function () {
    document.querySelectorAll("time[datetime]").forEach(function (t) {
      if (!/ ago$/.test(t.textContent)) return;
      var at = Date.parse(t.getAttribute("datetime"));
      if (!isNaN(at)) t.textContent = ago(Date.now() - at);
    });
  }, 15000);

  // The live stream.
  if (body.getAttribute("data-live") === "1" && window.EventSource) {
    var live = document.getElementById("live");
    // The stream starts where the page was read: what changed while it
    // loaded comes first.
    var es = new EventSource("/stream?since=" + encodeURIComponent(body.getAttribute("data-since") || ""));
    es.addEventListener("open", function () { if (live) { live.textContent = "live"; live.className = "live on"; } });
    es.addEventListener("error", function () { if (live) { live.textContent = "reconnecting"; live.className = "live off"; } });
    es.addEventListener("change", function (ev) {
      var c = {};
      try { c = JSON.parse(ev.data); } catch (e) {}
      // A ManifestSync's pages follow only it; the overview follows all.
      var m = location.pathname.match(/^\/ms\/([^/]+)\/([^/]+)/);
      if (m && c.namespace && (decodeURIComponent(m[1]) !== c.namespace || decodeURIComponent(m[2]) !== c.name)) return;
      // A diff or a comparison of commits is costly to compute again:
      // the page says it changed, and the user asks.
      var stale = document.querySelector("#main [data-refresh=manual]");
      if (stale) { stale.hidden = false; return; }
      refresh();
    });
  }
})();
