// teamctl dashboard: follow the page's server-sent events (the browser resumes with
// Last-Event-ID by itself) and, after a change, reload the page's body from the server,
// at most once a second. No framework, no build step.
(function () {
  "use strict";
  var body = document.body;
  var streamUrl = body.getAttribute("data-stream");
  if (!streamUrl) { return; }
  var refreshUrl = body.getAttribute("data-refresh");
  var state = document.getElementById("live-state");
  var log = document.getElementById("live-log");
  var pending = false;

  function say(text) {
    if (state) { state.textContent = text; }
  }

  function logLine(text) {
    if (!log) { return; }
    var item = document.createElement("li");
    item.textContent = text;  // text, never HTML: it may quote what a model wrote
    log.appendChild(item);
    while (log.children.length > 50) { log.removeChild(log.firstChild); }
    log.scrollTop = log.scrollHeight;
  }

  // A change that comes while a reload is under way is not lost: one more reload follows it.
  var again = false;

  function refresh() {
    if (!refreshUrl) { return; }
    if (pending) { again = true; return; }
    pending = true;
    setTimeout(function () {
      again = false;
      fetch(refreshUrl + window.location.search, {credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          var target = document.getElementById("live-body");
          if (html !== null && target) { target.innerHTML = html; }  // server-escaped HTML
        })
        .finally(function () {
          pending = false;
          if (again) { refresh(); }
        });
    }, 1000);
  }

  var source = new EventSource(streamUrl);
  source.onopen = function () { say("live"); };
  source.onerror = function () { say("reconnecting…"); };
  source.addEventListener("task", function (e) {
    var d = JSON.parse(e.data);
    var what = d.task_id || d.mate || "";
    var many = document.getElementById("runs") !== null;  // the runs page: say which run
    logLine((many ? d.owner + " " : "") + what + " " + d.status +
            (d.worker ? " on " + d.worker : ""));
    refresh();
  });
  source.addEventListener("state", function () { refresh(); });
  source.addEventListener("run", function (e) {
    // A run started: load the page again, whose stream then follows that run's events too.
    logLine(JSON.parse(e.data).owner + " started");
    source.close();
    setTimeout(function () { window.location.reload(); }, 1000);
  });
  source.addEventListener("message", function (e) {
    var d = JSON.parse(e.data);
    logLine(d.from + " → " + (d.to || "*") + " [" + d.type + "]");
    refresh();
  });
  source.addEventListener("end", function () {
    say("ended");
    source.close();
    refresh();
  });

  // Control forms keep the token for this tab only.
  var saved = window.sessionStorage.getItem("teamctl-token") || "";
  document.querySelectorAll("input[name=token]").forEach(function (input) {
    if (!input.value) { input.value = saved; }
    input.addEventListener("change", function () {
      window.sessionStorage.setItem("teamctl-token", input.value);
    });
  });
}());
