"""The one public address that every link a certificate signs is made from (issue #36).

A certificate names the academy by an address, forever: the verification link and its QR
code, the Open Badge's ``id``, the issuer's ``did:web``, the status-list URL and LinkedIn's
``certUrl``. :func:`public_url` is that address, and everything asks it:

- ``PUBLIC_URL`` when it is set (the address learners and verifiers use, behind any proxy);
- otherwise the address this app serves on, as Streamlit itself prints it on start-up
  ("You can now view your Streamlit app"): ``browser.serverAddress`` when set, else
  ``server.address`` when it names one address, else ``localhost``; with the port the server
  listens on (``server.port``: ``make run PORT=8631`` gives ``http://localhost:8631``) and
  ``server.baseUrlPath``.

In the Streamlit process that is the port it really serves on. Another process (``python -m
certificates``) reads Streamlit's options from the same ``.streamlit/config.toml``, but
cannot see the flags or ``STREAMLIT_*`` variables given to the app's ``streamlit run``
(``make run PORT=8631``): there, set ``PUBLIC_URL``. :func:`notice` says when certificates
will carry a local or a derived address (the start-up log and the Admin page show it); the
check that the address answers as this academy before anything is signed with it is
``certificates.addresscheck``.

Streamlit is imported only when ``PUBLIC_URL`` is not set, so that a configured CLI does not
load it.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from academy.settings import get_settings

# What notice() answers: nothing to say, an address derived from Streamlit's settings, or one
# that only this machine can open (whether derived or set).
DERIVED = "derived"
LOCAL = "local"


def configured() -> str:
    """``PUBLIC_URL`` without its trailing slash, or "" when it is not set."""
    return get_settings().public_url.strip().rstrip("/")


def served_url() -> str:
    """The address this app serves on, from Streamlit's options, as Streamlit prints it."""
    from streamlit import config
    from streamlit.web.server import server_util

    if config.is_manually_set("browser.serverAddress"):
        host = config.get_option("browser.serverAddress")
    else:
        address = config.get_option("server.address") or ""
        # A wildcard or a Unix socket is no address a browser can use: Streamlit says localhost then.
        host = address if address and address not in ("0.0.0.0", "::") and not address.startswith("unix:") \
            else "localhost"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address in a URL
    return server_util.get_url(host).rstrip("/")


def public_url() -> str:
    """The base of every link a certificate signs: ``PUBLIC_URL``, or else :func:`served_url`."""
    return configured() or served_url()


def is_local(url: str) -> bool:
    """Whether only this machine can open ``url``: ``localhost`` or a loopback or unspecified IP."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def notice() -> str | None:
    """:data:`LOCAL` when certificates will carry an address only this machine can open,
    :data:`DERIVED` when ``PUBLIC_URL`` is not set (the address comes from Streamlit's
    settings), None when ``PUBLIC_URL`` names a public address."""
    if is_local(public_url()):
        return LOCAL
    return None if configured() else DERIVED
