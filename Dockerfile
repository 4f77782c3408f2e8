# amqpd with the habits of RabbitMQ's official image: every listener on all interfaces and EXPOSEd, guest
# allowed from outside (loopback_users = [] in /etc/amqpd/amqpd.toml), AMQPD_DEFAULT_USER/PASS/VHOST for a
# fresh data dir, the data in a VOLUME, a non-root user, a HEALTHCHECK. See docs/container.md.
#   docker build -t amqpd . && docker run -d -p 5672:5672 -p 15672:15672 amqpd
FROM debian:bookworm-slim AS python
# Debian's python3 (3.11); Debian marks it externally managed, so amqpd lives in a venv of its own.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

FROM python AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3-venv \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/amqpd
COPY pyproject.toml README.md /src/
COPY amqpd /src/amqpd
COPY store /src/store
# pip and setuptools only build it: the broker does not need them at run time.
RUN /opt/amqpd/bin/pip install --no-cache-dir /src \
    && /opt/amqpd/bin/pip uninstall --yes pip setuptools

FROM python
RUN useradd --system --uid 999 --user-group --home-dir /var/lib/amqpd --shell /usr/sbin/nologin amqpd \
    && install -d -o amqpd -g amqpd -m 0750 /var/lib/amqpd
COPY --from=build /opt/amqpd /opt/amqpd
COPY conf/container.toml /etc/amqpd/amqpd.toml
# Where to listen and where the data is belong to the image; everything else is in the file (mount your own
# at /etc/amqpd/amqpd.toml) or in AMQPD_* variables, which win over the file.
ENV PATH=/opt/amqpd/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    AMQPD_HOST=0.0.0.0 \
    AMQPD_MGMT_HOST=0.0.0.0 \
    AMQPD_DATA_DIR=/var/lib/amqpd
VOLUME /var/lib/amqpd
WORKDIR /var/lib/amqpd
USER amqpd
# AMQP, amqps, management HTTP and HTTPS, Prometheus HTTP and HTTPS (the TLS ones serve once given a certificate).
EXPOSE 5672 5671 15672 15671 15692 15691
# Healthy once the AMQP listener answers a protocol header with connection.start (a method frame, type 1).
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 CMD ["python3", "-c", "import os, socket; s = socket.create_connection(('127.0.0.1', int(os.environ.get('AMQPD_PORT') or 5672)), 5); s.sendall(b'AMQP\\0\\0\\x09\\x01'); assert s.recv(1) == b'\\x01'"]
CMD ["amqpd", "--config", "/etc/amqpd/amqpd.toml"]
