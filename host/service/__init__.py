"""Running the host as a service: its settings, process set-up, Prometheus text, and the harness that
starts a real `serve` for the tests, the benchmark and the soak."""
