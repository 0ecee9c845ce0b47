// The transcript browser: unpack the stored texts once, fill a folded text when it is opened, filter, deep links.
(function () {
  "use strict";
  var packed = document.getElementById("texts");
  var pieces = null;
  var loading = null;

  function status(text) { document.body.setAttribute("data-texts", text); }

  function load() {
    if (loading) { return loading; }
    if (!packed || !packed.textContent.trim()) { pieces = []; loading = Promise.resolve(pieces); return loading; }
    if (typeof DecompressionStream === "undefined") {
      status("unsupported");
      loading = Promise.reject(new Error("this browser cannot unpack the texts (no DecompressionStream)"));
      return loading;
    }
    var binary = atob(packed.textContent.trim());
    var bytes = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i++) { bytes[i] = binary.charCodeAt(i); }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    loading = new Response(stream).text().then(function (json) {
      pieces = JSON.parse(json);
      status("ready");
      return pieces;
    });
    loading.catch(function (err) { status("error: " + err.message); });
    return loading;
  }

  function fill(details) {
    var pre = details.querySelector("pre[data-ref]");
    if (!pre || pre.getAttribute("data-filled")) { return Promise.resolve(); }
    pre.textContent = "unpacking...";
    return load().then(function (all) {
      pre.textContent = pre.getAttribute("data-ref").split(",").map(function (k) { return all[+k]; }).join("");
      pre.setAttribute("data-filled", "1");
    }, function (err) { pre.textContent = err.message; });
  }

  document.addEventListener("toggle", function (ev) {
    var d = ev.target;
    if (d.tagName === "DETAILS" && d.open && d.classList.contains("text")) { fill(d); }
  }, true);

  var box = document.getElementById("transcripts");
  var only = document.getElementById("only-invalid");
  if (only && box) {
    only.addEventListener("change", function () { box.classList.toggle("only-invalid", only.checked); });
  }
  function openAll(open) {
    document.querySelectorAll("details.iter").forEach(function (d) { d.open = open; });
  }
  var ob = document.getElementById("open-all");
  var cb = document.getElementById("close-all");
  if (ob) { ob.addEventListener("click", function () { openAll(true); }); }
  if (cb) { cb.addEventListener("click", function () { openAll(false); }); }

  function follow() {
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id && document.getElementById(id);
    if (!el) { return; }
    for (var p = el.parentElement; p; p = p.parentElement) { if (p.tagName === "DETAILS") { p.open = true; } }
    if (el.tagName === "DETAILS") { el.open = true; }
    var jobs = [];
    if (el.classList.contains("call")) {
      el.querySelectorAll("details.text").forEach(function (d) { d.open = true; jobs.push(fill(d)); });
    }
    Promise.all(jobs).then(function () { el.scrollIntoView(); });
  }
  window.addEventListener("hashchange", follow);
  follow();
  load();
})();
