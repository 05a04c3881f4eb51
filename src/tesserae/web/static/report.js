// Results page (report.html and `tesserae view`): interactive JCT CDF and timeline plots (uPlot)
// and the "why did this job wait?" drill-down. Data comes from the JSON block of the page; the
// viewer answers drill-downs for any job through its API. Text from files reaches the page only
// through textContent.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var palette = TesseraeCharts.palette;
  var runs = data.runs;
  function tidy(v) { return v == null ? "" : (Math.abs(v) >= 100 ? v.toFixed(0) : +v.toPrecision(3) + ""); }
  function label(r) { return runs.length > 1 && new Set(runs.map(function (x) { return x.group; })).size > 1 ? r.label + " (" + r.group + ")" : r.label; }

  function cdfPlot() {
    var tables = runs.map(function (r) { var c = data.cdf[r.key]; return [c.x, c.y]; })
                     .filter(function (t) { return t[0].length; });
    var shown = runs.filter(function (r) { return data.cdf[r.key].x.length; });
    var el = document.getElementById("cdf");
    if (!tables.length) { el.textContent = "No job completed."; return; }
    var joined = uPlot.join(tables);
    var series = [{label: "JCT (h)", value: function (u, v) { return v == null ? "-" : tidy(v) + " h"; }}];
    shown.forEach(function (r, i) {
      series.push({label: label(r), stroke: palette[i % palette.length], width: 2, spanGaps: true,
                   paths: uPlot.paths.stepped({align: 1}), value: function (u, v) { return v == null ? "-" : (100 * v).toFixed(1) + "%"; }});
    });
    TesseraeCharts.make({height: 340, series: series,
               scales: {x: {time: false, distr: 3}, y: {range: [0, 1]}},
               axes: [{label: "JCT (hours, log scale)", values: function (u, vals) { return vals.map(tidy); }},
                      {label: "fraction of jobs", values: function (u, vals) { return vals.map(function (v) { return (100 * v).toFixed(0) + "%"; }); }}]},
              joined, el);
  }

  function timelinePlots() {
    var sampled = runs.some(function (r) { return data.timeline[r.key].sampled; });
    if (sampled) document.getElementById("timeline-note").textContent +=
      " Long runs are shown as the maximum of each of 1,500 equal time slices.";
    TesseraeCharts.clusterOverTime(document.getElementById("timeline-gpus"), document.getElementById("timeline-queued"),
      runs.map(function (r) { var t = data.timeline[r.key]; return {label: label(r), t: t.t, gpus: t.gpus, queued: t.queued}; }),
      {capacity: data.cluster_gpus});
  }

  var out = document.getElementById("why-out");
  function show(lines, note) {
    out.textContent = "";
    var ul = document.createElement("ul");
    lines.forEach(function (s) { var li = document.createElement("li"); li.textContent = s; ul.appendChild(li); });
    out.appendChild(ul);
    if (note) { var p = document.createElement("p"); p.className = "muted"; p.textContent = note; out.appendChild(p); }
  }
  function why(run, job) {
    var known = data.explanations[run] && data.explanations[run][String(job)];
    var r = runs.filter(function (x) { return x.key === run; })[0];
    if (known) { show(known.sentences, known.name ? "Job name: " + known.name : ""); return; }
    if (data.api) {
      fetch(data.api + "?run=" + encodeURIComponent(run) + "&job=" + encodeURIComponent(job), {cache: "no-store"})
        .then(function (resp) { return resp.json().then(function (d) { return [resp.ok, d]; }); })
        .then(function (x) { if (x[0]) show(x[1].sentences, x[1].name ? "Job name: " + x[1].name : ""); else show([x[1].detail]); })
        .catch(function (e) { show(["The viewer did not answer: " + e.message]); });
      return;
    }
    show([data.explain_all ? "Job " + job + " is not in run " + (r ? r.label : run) + "."
          : "This file explains only the longest waits of each run; open the folder with `tesserae view` to ask about any job."]);
  }
  function longest() {
    var run = document.getElementById("why-run").value, box = document.getElementById("why-longest");
    box.textContent = "";
    runs.filter(function (x) { return x.key === run; })[0].longest.forEach(function (w, i) {
      var a = document.createElement("a");
      a.href = "#why"; a.textContent = "job " + w.job_id + " (" + tidy(w.wait / 3600) + " h)";
      a.setAttribute("data-job", w.job_id);
      a.addEventListener("click", function (ev) { ev.preventDefault(); document.getElementById("why-job").value = w.job_id; why(run, w.job_id); });
      if (i) box.appendChild(document.createTextNode(", "));
      box.appendChild(a);
    });
  }
  document.getElementById("why").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var job = document.getElementById("why-job").value.trim();
    if (!/^[0-9]+$/.test(job)) { show(["A job id is a whole number."]); return; }
    why(document.getElementById("why-run").value, parseInt(job, 10));
  });
  document.getElementById("why-run").addEventListener("change", longest);
  cdfPlot();
  timelinePlots();
  longest();
})();
