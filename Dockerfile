# adl operator image: kopf operator + scheduler + API service. No torch (only adl.client_lib
# needs it), so the image stays small. Build: docker build -t adl-operator:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY adl ./adl
RUN python -m venv /opt/adl \
 && /opt/adl/bin/pip install --no-cache-dir ".[operator]" \
 && /opt/adl/bin/python -c "import sys, adl.operator.handlers; assert 'torch' not in sys.modules"

FROM python:3.11-slim
LABEL org.opencontainers.image.title="adl-operator" \
      org.opencontainers.image.description="adl: elastic deep-learning training scheduler (operator)"
COPY --from=build /opt/adl /opt/adl
RUN groupadd --gid 10001 adl && useradd --uid 10001 --gid adl --no-create-home --shell /sbin/nologin adl
ENV PATH=/opt/adl/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
USER 10001:10001
EXPOSE 8080 8081
ENTRYPOINT ["python", "-m", "adl.operator"]
