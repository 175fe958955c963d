"""Test-only kopf login: point the operator at kmock (KMOCK_URL) instead of a kubeconfig."""

import os

import kopf


@kopf.on.login()
def login_to_kmock(**_: object) -> kopf.ConnectionInfo:
    return kopf.ConnectionInfo(server=os.environ["KMOCK_URL"], insecure=True)
