# A live image on an environment: the environment image (BASE, an approved local ID: the python
# gate image or an environment built from a requirements file, whose toolchain and packages the
# agent's commands use) plus the live layer: the static turn runner, the agent and whatever the
# agent links that the environment lacks (images/live/common.sh, live_onto_environment). Built
# by images/build.sh --live --agent A --env NAME; nothing is pulled.
ARG BASE
FROM ${BASE}
COPY root/ /
COPY layout/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/sandbox
USER 10001:10001
WORKDIR /workspace
ENTRYPOINT ["/turn-runner", "--live"]
