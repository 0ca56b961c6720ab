# polymath-host in a container: slim, non-root, ready means /readyz.
#
#   docker build --target edge -t polymath-host:edge .    # replicas: vectors only, S3/HTTPS origins (~120 MB)
#   docker build --target embed -t polymath-host:embed .  # + the local text embedder and the sample library
#
#   docker run -p 8080:8080 polymath-host:embed            # the sample library, searchable in words
#   docker run -p 8080:8080 -e AWS_ENDPOINT_URL -e AWS_ACCESS_KEY_ID -e AWS_SECRET_ACCESS_KEY -e AWS_DEFAULT_REGION \
#       polymath-host:edge serve --host 0.0.0.0 --libraries s3://bucket/prefix --drain-seconds 3 \
#       --origin-key ed25519:...    # the publisher's public key: only sets it signed are served
#
# The mirror of a published set and the compiled stores go to /var/cache/polymath-host (a volume,
# so a restarted container starts warm). `docker stop` sends SIGTERM: with --drain-seconds the
# host answers /readyz 503 while the load balancer takes it out, then finishes and exits; keep
# docker's stop timeout (10 s) above the drain.

FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    POLYMATH_HOST_CACHE_DIR=/var/cache/polymath-host
RUN useradd --system --uid 10001 --home-dir /srv --shell /usr/sbin/nologin polymath \
 && mkdir -p /srv /var/cache/polymath-host \
 && chown polymath /srv /var/cache/polymath-host
COPY pyproject.toml README.md /build/
COPY host /build/host
COPY access /build/access
WORKDIR /srv
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s --retries=2 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=2).status != 200)"]
ENTRYPOINT ["polymath-host"]

# Edge replicas: the core and the S3 client; no embedder (queries bring their vectors).
FROM base AS edge
RUN pip install "/build[s3]" && rm -rf /build
USER polymath
VOLUME /var/cache/polymath-host
CMD ["serve", "--host", "0.0.0.0", "--port", "8080", "--embedder", "none", "--drain-seconds", "3", \
     "--libraries", "/srv/libraries"]

# The whole host: text queries with the local embedder (its graph built once, at image build time).
FROM base AS embed
RUN pip install "/build[s3,embed,mcp]" && rm -rf /build
COPY --chown=polymath libraries /srv/libraries
USER polymath
RUN python -c "from host.embedders.minilm import MiniLMEmbedder; MiniLMEmbedder().load()"
VOLUME /var/cache/polymath-host
CMD ["serve", "--host", "0.0.0.0", "--port", "8080", "--drain-seconds", "3", "--libraries", "/srv/libraries"]
