"""Web front ends: the cluster dashboard served by ``tesserae server`` at ``/ui`` and the results
viewer of ``tesserae view`` (and the self-contained ``report.html`` of ``simulate``/``compare``).

Modules: ``ui`` (what ``tesserae server`` mounts: static files, login and logout, the pages),
``dashboard`` (what every page is made with: rendering, errors, the in-process API client),
``cluster_pages`` (cluster, queue, usage), ``job_pages`` (jobs list, job page, actions, log tail),
``session`` and ``login_limits`` (login, cookie sessions, CSRF, rate limits), ``results`` (reading
an output folder; why a job waited), ``report`` (report.html), ``viewer`` (``tesserae view``),
``assets`` and ``templating``. The pages read the runtime's HTTP API only (its cluster views are
``runtime.api.cluster``); every file a page loads ships in the package.
"""
