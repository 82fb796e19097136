#!/bin/sh
# Run a build command trusting the system's CAs plus the build secret `extra_ca`, when given.
#
# Networks that re-sign outgoing TLS with their own CA (ours, many corporate ones) make pip and
# uv fail with CERTIFICATE_VERIFY_FAILED. The secret is mounted for the one RUN that needs it,
# and the bundle is removed afterwards: nothing of it stays in a layer.
set -eu
extra=/run/secrets/extra_ca
if [ ! -s "$extra" ]; then exec "$@"; fi
bundle=$(mktemp)
trap 'rm -f "$bundle"' EXIT
cat /etc/ssl/certs/ca-certificates.crt "$extra" > "$bundle"
# uv reads SSL_CERT_FILE, pip PIP_CERT, requests (setuptools' downloads) REQUESTS_CA_BUNDLE.
SSL_CERT_FILE=$bundle PIP_CERT=$bundle REQUESTS_CA_BUNDLE=$bundle "$@"
