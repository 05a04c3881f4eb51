"""Web front ends: the cluster dashboard served by ``tesserae server`` at ``/ui`` and the results
viewer of ``tesserae view`` (and the self-contained ``report.html`` of ``simulate``/``compare``).

Modules: ``session`` (login, cookie sessions, CSRF), ``dashboard`` (mounting, rendering, the
in-process API client), ``cluster_pages`` (cluster, queue, usage), ``job_pages`` (jobs list, job
page, actions, log tail; the JSON routes they read are the API's), ``results``
(reading an output folder; why a job waited), ``report`` (report.html), ``viewer`` (``tesserae
view``), ``assets`` and ``templating``. Every file a page loads ships in the package.
"""
