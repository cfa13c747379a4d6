"""The Prometheus metrics endpoint (``metrics.enable``): ``collector`` reads the
broker's shared memory, ``exporter`` is the supervisor's child serving it over HTTP,
``http_server`` the HTTP server it runs (a fixed number of threads)."""
