# The image of one environment definition, gym-repost-sandbox:NAME: a layer on the base
# image (BASE_IMAGE, gym-repost-sandbox:base, built first when missing or stale) that adds
# the packages of envs/NAME/requirements.txt to its virtual environment, so building an
# environment's image installs only what the environment adds.
# Built by `gym-repost sandbox build-image --env envs/NAME` (gym_repost/sandbox/docker_image.py),
# which writes build/requirements.txt, build/pip.env and, when the host has one, build/ca.crt.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

COPY build/ /opt/gym-repost/build/
RUN set -eu; \
    . /opt/gym-repost/build/pip.env; \
    if [ -s /opt/gym-repost/build/ca.crt ]; then export PIP_CERT=/opt/gym-repost/build/ca.crt; fi; \
    /opt/gym-repost/venv/bin/python3 -m pip install --no-cache-dir --disable-pip-version-check \
        --no-input -r /opt/gym-repost/build/requirements.txt; \
    rm -f /opt/gym-repost/build/pip.env
