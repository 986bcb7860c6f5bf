"""Issuer keys and the signed payload: round trip, tampering, rotation."""

from __future__ import annotations

import json
import stat
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from certificates import keys, signing
from certificates.ids import new_id


def _payload(**over):
    fields = dict(
        cert_id=new_id(),
        name="Zoë Ødegård",
        course="data-parallelism",
        score=92.5,
        pass_date="2025-11-30",
        lang="en",
        issuer="Data Parallelism Academy",
    )
    fields.update(over)
    return signing.make_payload(**fields)


def test_key_created_on_first_use_with_owner_only_permissions(secrets):
    assert not secrets.exists()
    key = keys.active_key()
    folder = secrets / keys.KEYS_SUBDIR
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert (folder / f"{key.kid}.key").exists()
    assert keys.active_key().kid == key.kid  # loaded, not recreated


@pytest.mark.usefixtures("secrets")
def test_round_trip_and_canonical_json():
    signed = signing.sign(_payload(name="张伟", lang="zh"))
    assert signed.payload == signing.canonical(json.loads(signed.payload)).decode("utf-8")
    assert " " not in signed.payload.replace("Data Parallelism Academy", "")
    assert "张伟" in signed.payload  # UTF-8, not \\u escapes
    payload = signing.verify(signed.payload.encode(), signed.signature, keys.local_public_keys())
    assert payload["name"] == "张伟"
    assert payload["kid"] == signed.kid == keys.active_key().kid
    assert set(payload) == set(signing.FIELDS)


@pytest.mark.parametrize(
    "field, value",
    [
        ("id", "DP-0000-0000-0000-0000-00"),
        ("name", "Zoe Odegard"),
        ("course", "pipeline-parallelism"),
        ("score", 100),
        ("pass_date", "2025-12-01"),
        ("lang", "nl"),
        ("issuer", "Someone Else"),
        ("v", 2),
    ],
)
@pytest.mark.usefixtures("secrets")
def test_tampering_with_any_field_is_rejected(field, value):
    signed = signing.sign(_payload())
    payload = json.loads(signed.payload)
    payload[field] = value
    with pytest.raises(signing.SignatureError):
        signing.verify(signing.canonical(payload), signed.signature, keys.local_public_keys())


@pytest.mark.usefixtures("secrets")
def test_tampering_with_the_bytes_or_the_signature_is_rejected():
    signed = signing.sign(_payload())
    public = keys.local_public_keys()
    raw = signed.payload.encode()
    # a changed byte, and the same JSON re-serialised differently
    with pytest.raises(signing.SignatureError):
        signing.verify(raw.replace(b"92.5", b"99.5"), signed.signature, public)
    with pytest.raises(signing.SignatureError):
        signing.verify(json.dumps(json.loads(raw)).encode(), signed.signature, public)
    sig = signing.b64url_decode(signed.signature)
    for i in (0, 31, 63):
        flipped = sig[:i] + bytes([sig[i] ^ 1]) + sig[i + 1 :]
        with pytest.raises(signing.SignatureError):
            signing.verify(raw, signing.b64url(flipped), public)
    for bad in ("", "not base64!", signed.signature[:-4]):
        with pytest.raises(signing.SignatureError):
            signing.verify(raw, bad, public)
    with pytest.raises(signing.SignatureError):
        signing.verify(b"\xff\xfe", signed.signature, public)


@pytest.mark.usefixtures("secrets")
def test_unknown_key_and_forged_kid(tmp_path):
    signed = signing.sign(_payload())
    with pytest.raises(signing.UnknownKey):
        signing.verify(signed.payload.encode(), signed.signature, {})
    # Someone else's key, claiming our kid: still rejected.
    other = keys.active_key(tmp_path / "other")
    forged = signing.canonical({**json.loads(signed.payload)})
    assert other.private is not None
    forged_sig = signing.b64url(other.private.sign(forged))
    with pytest.raises(signing.SignatureError):
        signing.verify(forged, forged_sig, keys.local_public_keys())


@pytest.mark.usefixtures("secrets")
def test_rotation_keeps_old_certificates_verifiable():
    old = signing.sign(_payload())
    new_key = keys.rotate_key()
    assert new_key.kid != old.kid
    assert keys.active_key().kid == new_key.kid
    new = signing.sign(_payload())
    assert new.kid == new_key.kid
    public = keys.local_public_keys()
    assert set(public) == {old.kid, new.kid}
    for signed in (old, new):
        signing.verify(signed.payload.encode(), signed.signature, public)
    infos = keys.public_key_info()
    assert infos[0].active and infos[0].kid == new.kid
    assert "BEGIN PUBLIC KEY" in infos[0].pem


@pytest.mark.usefixtures("secrets")
def test_exported_public_keys_verify_without_the_key_folder(tmp_path):
    signed = signing.sign(_payload())
    json_file = tmp_path / "keys.json"
    json_file.write_text(keys.export_public_keys_json())
    pem_file = tmp_path / "keys.pem"
    pem_file.write_text("".join(info.pem for info in keys.public_key_info()))
    for path in (json_file, pem_file):
        public = keys.load_public_keys_file(path)
        assert signed.kid in public
        signing.verify(signed.payload.encode(), signed.signature, public)
    assert "PRIVATE" not in json_file.read_text() + pem_file.read_text()


def test_reading_keys_creates_nothing(tmp_path):
    assert keys.local_public_keys(tmp_path / "nowhere") == {}
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.usefixtures("secrets")
def test_first_use_from_many_threads_makes_one_key():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        kids = set(pool.map(lambda _: keys.active_key().kid, range(16)))
    assert len(kids) == 1
    assert len(keys.local_public_keys()) == 1


@pytest.mark.usefixtures("secrets")
def test_the_public_keys_follow_the_folder_and_cannot_be_changed_by_a_caller():
    """Read once per state of the folder (issue #26: a few ``stat`` calls per look-up),
    yet a key added, rewritten in place or removed is seen at the very next call."""
    first = keys.active_key()
    public = keys.local_public_keys()
    assert set(public) == {first.kid}
    with pytest.raises(TypeError):
        public["x"] = first.public  # shared by every caller: read-only
    second = keys.rotate_key()
    assert set(keys.local_public_keys()) == {first.kid, second.kid}
    # Rewritten in place (same name, same size): the second key's file now holds a third key.
    third = Ed25519PrivateKey.generate().public_key()
    path = keys.keys_dir() / f"{second.kid}.pub"
    with open(path, "r+b") as f:
        f.write(keys.public_pem(third).encode("ascii"))
    assert set(keys.local_public_keys()) == {first.kid, keys.key_id(third)}
    path.unlink()
    assert set(keys.local_public_keys()) == {first.kid}
    assert keys.public_keys() == dict(keys.local_public_keys())  # a copy a caller may extend


@pytest.mark.usefixtures("secrets")
def test_a_settled_folder_is_not_read_again(monkeypatch):
    keys.active_key()
    keys.local_public_keys()
    monkeypatch.setattr(keys, "_settled", lambda _mtimes: True)  # as if the last change were long ago
    settled = keys.local_public_keys()  # read once more, now trusted
    monkeypatch.setattr(keys.serialization, "load_pem_public_key", None)  # a read would fail
    assert keys.local_public_keys() is settled


def test_a_change_is_settled_once_the_file_systems_clock_has_ticked():
    now = time.time_ns()
    assert not keys._settled([now - 1_000]) and keys._settled([now - 200_000_000])
    whole = (now // 10**9 - 1) * 10**9  # whole seconds: a coarse clock (FAT, old ext3)
    assert not keys._settled([whole]) and keys._settled([whole - 2 * 10**9])
