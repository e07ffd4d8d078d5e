"""A corpus of secrets as agents leak them, and of look-alikes that are no secret.

Every secret is made at run time from its vendor's documented format, with a
seeded random (none is a real key), and set inside the tool output it would
arrive in: a ``cat .env``, ``env``, ``git config -l``, ``kubectl get secret -o
yaml``, a ``curl -v`` trace, a JSON config. Each case names its kind and the
values that must not survive; the look-alikes must come back unchanged.
"""

from __future__ import annotations

import base64
import json
import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobot_redact import DEFAULT_PATTERNS, Scanner

SCANNER = Scanner(DEFAULT_PATTERNS)
_RNG = random.Random(20_261_207)
_ALNUM = string.ascii_letters + string.digits
_B64URL = _ALNUM + "-_"
_HEX = "0123456789abcdef"


def _pick(alphabet: str, length: int) -> str:
    """`length` characters drawn from `alphabet` with the corpus's seeded random."""
    return "".join(_RNG.choice(alphabet) for _ in range(length))


def _b64(length: int) -> str:
    """Base64 of `length` random bytes (a PEM body's, an Azure key's)."""
    return base64.b64encode(bytes(_RNG.randrange(256) for _ in range(length))).decode()


def _pem(label: str, body_bytes: int = 600) -> str:
    """A PEM block of `label` with random base64 lines of 64 characters."""
    body = _b64(body_bytes)
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"])


# --- The secrets, one maker per documented format ------------------------------------------

# GitHub: https://github.blog/2021-04-05-behind-githubs-new-authentication-token-formats/
# (a prefix of ghp_/gho_/ghu_/ghs_/ghr_ and 36 base62 characters, the last 6 a checksum) and
# https://docs.github.com/en/authentication/keeping-your-account-and-data-secure/managing-your-personal-access-tokens
# (fine-grained: github_pat_ + 22 base62 + "_" + 59 base62).
GITHUB = {p: p + _pick(_ALNUM, 36) for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")}
GITHUB_PAT = "github_pat_" + _pick(_ALNUM, 22) + "_" + _pick(_ALNUM, 59)
# GitLab: https://docs.gitlab.com/ee/security/tokens/ (glpat- + 20 characters).
GITLAB = "glpat-" + _pick(_B64URL, 20)
# AWS: https://docs.aws.amazon.com/IAM/latest/UserGuide/security-creds-programmatic-access.html
# and https://docs.aws.amazon.com/STS/latest/APIReference/API_Credentials.html: an access
# key ID is AKIA/ASIA + 16 upper-case base32 characters, the secret 40 base64 characters.
AWS_ID = "AKIA" + _pick(string.ascii_uppercase + "234567", 16)
AWS_SECRET = _pick(_ALNUM + "/+", 40)
AWS_SESSION_ID = "ASIA" + _pick(string.ascii_uppercase + "234567", 16)
# GCP: https://cloud.google.com/iam/docs/keys-create-delete (the JSON key file's private_key
# is a PKCS#8 PEM with its line breaks escaped as \n).
GCP_KEY = _pem("PRIVATE KEY", 1200) + "\n"
# Azure Storage: https://learn.microsoft.com/azure/storage/common/storage-configure-connection-string
# (AccountKey= the base64 of a 64-byte key, 88 characters).
AZURE_KEY = _b64(64)
# Slack: https://api.slack.com/authentication/token-types (xoxb-, xoxp-, app-level xapp-)
# and https://api.slack.com/messaging/webhooks (hooks.slack.com/services/T.../B.../secret).
SLACK_BOT = f"xoxb-{_pick(string.digits, 13)}-{_pick(string.digits, 13)}-{_pick(_ALNUM, 24)}"
SLACK_USER = (
    f"xoxp-{_pick(string.digits, 13)}-{_pick(string.digits, 13)}-{_pick(string.digits, 13)}"
    f"-{_pick(_HEX, 32)}"
)
SLACK_APP = (
    f"xapp-1-A{_pick(string.ascii_uppercase + string.digits, 10)}-{_pick(string.digits, 13)}"
    f"-{_pick(_HEX, 64)}"
)
SLACK_HOOK = (
    f"T{_pick(string.ascii_uppercase + string.digits, 8)}/B{_pick(string.ascii_uppercase, 10)}"
    f"/{_pick(_ALNUM, 24)}"
)
# Stripe: https://docs.stripe.com/keys (sk_live_ secret, rk_live_ restricted keys).
STRIPE_SECRET = "sk_live_" + _pick(_ALNUM, 99)
STRIPE_RESTRICTED = "rk_live_" + _pick(_ALNUM, 99)
# OpenAI: https://platform.openai.com/docs/api-reference/authentication (project keys sk-proj-,
# older user keys sk- + 48 characters).
OPENAI_PROJECT = "sk-proj-" + _pick(_B64URL, 156)
OPENAI_LEGACY = "sk-" + _pick(_ALNUM, 48)
# Anthropic: https://docs.anthropic.com/en/api/getting-started (sk-ant-api03-...).
ANTHROPIC = "sk-ant-api03-" + _pick(_B64URL, 93) + "AA"
# Hugging Face: https://huggingface.co/docs/hub/security-tokens (hf_ + 34 letters).
HUGGINGFACE = "hf_" + _pick(string.ascii_letters, 34)
# npm: https://github.blog/2021-09-23-announcing-npms-new-access-token-format/ (npm_ + 36).
NPM = "npm_" + _pick(_ALNUM, 36)
# PyPI: https://pypi.org/help/#apitoken (pypi- and a macaroon, base64 of "pypi.org" first).
PYPI = "pypi-AgEIcHlwaS5vcmc" + _pick(_B64URL, 150)
# Twilio: https://www.twilio.com/docs/iam/api-keys (API key SID SK + 32 hex, its secret 32
# characters) and https://www.twilio.com/docs/iam/credentials/api (Account SID AC + 32 hex,
# auth token 32 hex).
TWILIO_SID = "AC" + _pick(_HEX, 32)
TWILIO_TOKEN = _pick(_HEX, 32)
TWILIO_KEY_SID = "SK" + _pick(_HEX, 32)
TWILIO_KEY_SECRET = _pick(_ALNUM, 32)
# SendGrid: https://www.twilio.com/docs/sendgrid/ui/account-and-settings/api-keys
# (SG. + 22 + "." + 43 base64url characters).
SENDGRID = f"SG.{_pick(_B64URL, 22)}.{_pick(_B64URL, 43)}"
# Database URLs: https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING-URIS,
# https://dev.mysql.com/doc/refman/8.0/en/connecting-using-uri-or-key-value-pairs.html,
# https://www.mongodb.com/docs/manual/reference/connection-string/.
DB_PASSWORD = _pick(_ALNUM, 20)
# JWT: https://datatracker.ietf.org/doc/html/rfc7519 (three base64url parts, JSON header).
JWT = ".".join(
    (
        base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("="),
        base64.urlsafe_b64encode(b'{"sub":"1234","exp":1999999999}').decode().rstrip("="),
        _pick(_B64URL, 43),
    )
)
BEARER = _pick(_B64URL, 40)
BASIC = base64.b64encode(f"deploy:{_pick(_ALNUM, 16)}".encode()).decode()
ENV_PASSWORD = _pick(_ALNUM + "!#%", 18)
ENV_SECRET_KEY = _pick(_ALNUM, 50)
ENV_API_KEY = _pick(_HEX, 32)
# PEM: https://datatracker.ietf.org/doc/html/rfc7468 and the OpenSSH key format
# (PROTOCOL.key); PGP armor: https://datatracker.ietf.org/doc/html/rfc4880#section-6.2.
PEM_RSA = _pem("RSA PRIVATE KEY")
PEM_EC = _pem("EC PRIVATE KEY", 120)
PEM_OPENSSH = _pem("OPENSSH PRIVATE KEY", 400)
PGP_PRIVATE = _pem("PGP PRIVATE KEY BLOCK", 800).replace("BLOCK-----\n", "BLOCK-----\n\n", 1)


def _kube_secret(**data: str) -> str:
    """`kubectl get secret -o yaml` of an Opaque secret holding `data`."""
    encoded = "".join(
        f"  {key}: {base64.b64encode(value.encode()).decode()}\n" for key, value in data.items()
    )
    return (
        "apiVersion: v1\ndata:\n" + encoded + "kind: Secret\nmetadata:\n  name: app\n"
        "  namespace: default\ntype: Opaque\n"
    )


#: (kind, tool output, the values that must not survive the scan).
SECRETS: list[tuple[str, str, tuple[str, ...]]] = [
    *(
        (
            "github_token",
            f"$ git config -l\nurl.https://x-access-token:{t}@github.com/.insteadof=https://x/\n",
            (t,),
        )
        for t in GITHUB.values()
    ),
    ("github_token", f"$ cat .env\nGITHUB_TOKEN={GITHUB_PAT}\n", (GITHUB_PAT,)),
    ("github_token", json.dumps({"github": {"token": GITHUB["ghp_"]}}), (GITHUB["ghp_"],)),
    ("gitlab_token", f"$ env | grep GL\nGITLAB_TOKEN={GITLAB}\n", (GITLAB,)),
    (
        "aws_credentials_file",
        f"$ cat ~/.aws/credentials\n[default]\naws_access_key_id = {AWS_ID}\n"
        f"aws_secret_access_key = {AWS_SECRET}\n",
        (AWS_ID, AWS_SECRET),
    ),
    (
        "aws_env",
        f"$ env\nHOME=/home/dev\nAWS_ACCESS_KEY_ID={AWS_SESSION_ID}\n"
        f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}\nAWS_DEFAULT_REGION=eu-west-1\n",
        (AWS_SESSION_ID, AWS_SECRET),
    ),
    (
        "gcp_service_account",
        json.dumps(
            {
                "type": "service_account",
                "project_id": "demo-project",
                "private_key_id": _pick(_HEX, 40),
                "private_key": GCP_KEY,
                "client_email": "ci@demo-project.iam.gserviceaccount.com",
            },
            indent=2,
        ),
        tuple(line for line in GCP_KEY.splitlines()[1:-1]),
    ),
    (
        "azure_storage",
        "$ az storage account show-connection-string -n demo\n"
        + json.dumps(
            {
                "connectionString": "DefaultEndpointsProtocol=https;AccountName=demo;"
                f"AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net"
            },
            indent=2,
        ),
        (AZURE_KEY,),
    ),
    ("slack_token", f"$ cat .env\nSLACK_BOT_TOKEN={SLACK_BOT}\n", (SLACK_BOT,)),
    ("slack_token", f'{{"slack": {{"user_token": "{SLACK_USER}"}}}}', (SLACK_USER,)),
    ("slack_app_token", f"$ cat .env\nSLACK_APP_TOKEN={SLACK_APP}\n", (SLACK_APP,)),
    (
        "slack_webhook",
        f"$ cat config.yaml\nalerts:\n  webhook: https://hooks.slack.com/services/{SLACK_HOOK}\n",
        (SLACK_HOOK,),
    ),
    ("stripe_api_key", f"$ env\nSTRIPE_SECRET_KEY={STRIPE_SECRET}\n", (STRIPE_SECRET,)),
    ("stripe_api_key", f'stripe.api_key = "{STRIPE_RESTRICTED}"\n', (STRIPE_RESTRICTED,)),
    ("openai_api_key", f"$ cat .env\nOPENAI_API_KEY={OPENAI_PROJECT}\n", (OPENAI_PROJECT,)),
    (
        "openai_api_key",
        f"> POST /v1/chat/completions HTTP/1.1\n> Authorization: Bearer {OPENAI_LEGACY}\n",
        (OPENAI_LEGACY,),
    ),
    ("anthropic_api_key", f'{{"env": {{"ANTHROPIC_API_KEY": "{ANTHROPIC}"}}}}', (ANTHROPIC,)),
    ("huggingface_token", f"$ cat ~/.cache/huggingface/token\n{HUGGINGFACE}\n", (HUGGINGFACE,)),
    ("npm_token", f"$ cat ~/.npmrc\n//registry.npmjs.org/:_authToken={NPM}\n", (NPM,)),
    (
        "pypi_token",
        f"$ cat ~/.pypirc\n[pypi]\nusername = __token__\npassword = {PYPI}\n",
        (PYPI,),
    ),
    (
        "twilio",
        f"$ cat .env\nTWILIO_ACCOUNT_SID={TWILIO_SID}\nTWILIO_AUTH_TOKEN={TWILIO_TOKEN}\n"
        f"TWILIO_API_KEY={TWILIO_KEY_SID}\nTWILIO_API_SECRET={TWILIO_KEY_SECRET}\n",
        (TWILIO_TOKEN, TWILIO_KEY_SECRET),
    ),
    ("sendgrid_api_key", f"$ env\nSENDGRID_API_KEY={SENDGRID}\n", (SENDGRID,)),
    (
        "url_password",
        f"$ env\nDATABASE_URL=postgres://app:{DB_PASSWORD}@db.internal:5432/app\n",
        (DB_PASSWORD,),
    ),
    (
        "url_password",
        f'{{"db": "mysql://root:{DB_PASSWORD}@127.0.0.1:3306/shop"}}',
        (DB_PASSWORD,),
    ),
    (
        "url_password",
        f"MONGO_URI=mongodb+srv://svc:{DB_PASSWORD}@cluster0.ab1cd.mongodb.net/?retryWrites=true\n",
        (DB_PASSWORD,),
    ),
    (
        "env_secret",
        f"$ cat .env\nDEBUG=false\nPASSWORD={ENV_PASSWORD}\nSECRET_KEY={ENV_SECRET_KEY}\n"
        f"API_KEY={ENV_API_KEY}\n",
        (ENV_PASSWORD, ENV_SECRET_KEY, ENV_API_KEY),
    ),
    (
        "env_secret",
        f"$ env\nexport DB_PASSWORD='{ENV_PASSWORD}'\n"
        f'export DJANGO_SECRET_KEY="{ENV_SECRET_KEY}"\n',
        (ENV_PASSWORD, ENV_SECRET_KEY),
    ),
    (
        "bearer_token",
        f"$ curl -v https://api.example.com/v1/me\n> GET /v1/me HTTP/2\n> Host: api.example.com\n"
        f"> authorization: Bearer {BEARER}\n> accept: */*\n< HTTP/2 200\n",
        (BEARER,),
    ),
    (
        "basic_auth",
        f"$ curl -v https://registry.example.com/v2/\n> GET /v2/ HTTP/1.1\n"
        f"> Authorization: Basic {BASIC}\n< HTTP/1.1 200 OK\n",
        (BASIC,),
    ),
    ("jwt", f'< set-cookie: session={JWT}; Path=/; HttpOnly\n{{"id_token": "{JWT}"}}', (JWT,)),
    ("private_key", f"$ cat ~/.ssh/id_rsa\n{PEM_RSA}\n", tuple(PEM_RSA.splitlines()[1:-1])),
    ("private_key", f"$ cat key.pem\n{PEM_EC}\n", tuple(PEM_EC.splitlines()[1:-1])),
    (
        "private_key",
        f"$ cat ~/.ssh/id_ed25519\n{PEM_OPENSSH}\n",
        tuple(PEM_OPENSSH.splitlines()[1:-1]),
    ),
    (
        "private_key",
        f"$ gpg --export-secret-keys --armor\n{PGP_PRIVATE}\n",
        tuple(PGP_PRIVATE.splitlines()[2:-1]),
    ),
]

#: (kind, tool output) of secrets the stage does not find, as its README says.
MISSED: list[tuple[str, str]] = [
    (
        "kubernetes_secret",
        "$ kubectl get secret app -o yaml\n"
        + _kube_secret(password=ENV_PASSWORD, **{"api-key": ENV_API_KEY}),
    ),
    ("prose_password", f"The staging password is {ENV_PASSWORD}, use it for now."),
    ("lower_case_env", f"$ cat config.ini\ndb_password = {ENV_PASSWORD}\n"),
]


# --- The look-alikes: long, random-looking or secret-named, and no secret ------------------

_GIT_SHA = _pick(_HEX, 40)
_PNG = "iVBORw0KGgoAAAANSUhEUgAA" + _b64(900)
_SSH_PUBLIC = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQ" + _b64(380) + " dev@laptop"

#: (kind, tool output that holds no secret).
LOOKALIKES: list[tuple[str, str]] = [
    (
        "git_sha",
        f"$ git log --oneline -3\n{_GIT_SHA[:7]} Fix the parser\n"
        f"$ git rev-parse HEAD\n{_GIT_SHA}\ncommit {_pick(_HEX, 40)}\nMerge: {_pick(_HEX, 7)}\n",
    ),
    (
        "uuid",
        "$ kubectl get pods -o json | jq .items[].metadata.uid\n"
        + "\n".join(
            f'"{_pick(_HEX, 8)}-{_pick(_HEX, 4)}-4{_pick(_HEX, 3)}-a{_pick(_HEX, 3)}-'
            f'{_pick(_HEX, 12)}"'
            for _ in range(5)
        ),
    ),
    (
        "lockfile_digest",
        '$ cat package-lock.json\n{"node_modules/left-pad": {"version": "1.3.0",\n'
        f'  "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz",\n'
        f'  "integrity": "sha512-{_b64(64)}"}}}}\n'
        f"$ cat poetry.lock\nfiles = [\n"
        f'    {{file = "attrs-23.2.0-py3-none-any.whl", hash = "sha256:{_pick(_HEX, 64)}"}},\n]\n'
        f"$ sha256sum dist/*\n{_pick(_HEX, 64)}  dist/app-1.0.tar.gz\n",
    ),
    (
        "image_data",
        f'{{"type": "image", "source": {{"type": "base64", "media_type": "image/png", '
        f'"data": "{_PNG}"}}}}\n<img src="data:image/png;base64,{_PNG}">',
    ),
    (
        "long_words",
        "Pneumonoultramicroscopicsilicovolcanoconiosis and "
        "Supercalifragilisticexpialidocious; internationalization-localization-accessibility "
        "tokenization_secretary_keyboard, the skeleton-key desk-top passwordless sign-in.",
    ),
    (
        "public_key",
        f"$ cat ~/.ssh/id_rsa.pub\n{_SSH_PUBLIC}\n$ cat pub.pem\n{_pem('PUBLIC KEY', 294)}\n"
        f"$ cat cert.pem\n{_pem('CERTIFICATE', 700)}\n"
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + _b64(24) + " ci@runner\n",
    ),
    (
        "placeholder",
        "$ cat .env.example\nOPENAI_API_KEY=sk-...\nANTHROPIC_API_KEY=<YOUR_API_KEY>\n"
        "STRIPE_SECRET_KEY=sk_live_xxxx\nGITHUB_TOKEN=ghp_xxxx\nPASSWORD=\nSECRET_KEY=${SECRET_KEY}\n"
        "API_KEY=$API_KEY\nDATABASE_URL=postgres://user:${DB_PASSWORD}@localhost/app\n"
        "AWS_SECRET_ACCESS_KEY=<your secret key>\nSLACK_BOT_TOKEN=xoxb-your-token\n",
    ),
    (
        "settings_not_secrets",
        "$ cat .env\nPASSWORD_MIN_LENGTH=12\nTOKEN_TTL_SECONDS=3600\n"
        "SECRET_KEY_FILE=/run/secrets/key\n"
        "API_KEY_HEADER=X-Api-Key\nAUTH_TOKEN_URL=https://auth.example.com/token\n",
    ),
    (
        "code",
        "def login(password: str, api_key: str | None = None) -> Token:\n"
        '    password = os.environ["PASSWORD"]\n    secret_key = settings.SECRET_KEY\n'
        "    token = client.get_token(scope=SCOPE)\n    return Token(api_key=api_key)\n",
    ),
]


@pytest.mark.parametrize(
    ("kind", "text", "secrets"), SECRETS, ids=[f"{i}-{s[0]}" for i, s in enumerate(SECRETS)]
)
def test_every_secret_of_the_corpus_is_removed(
    kind: str, text: str, secrets: tuple[str, ...]
) -> None:
    """No value of a documented secret format survives the scan of the tool output it came in."""
    redacted, found = SCANNER.redact(text)
    assert found, kind
    assert [s for s in secrets if s in redacted] == []


@pytest.mark.parametrize(
    ("kind", "text", "secrets"), SECRETS, ids=[f"{i}-{s[0]}" for i, s in enumerate(SECRETS)]
)
def test_every_text_of_the_corpus_passes_the_stages_prefilter(
    kind: str, text: str, secrets: tuple[str, ...]
) -> None:
    """The stage's prefilter and its early-exit test let every tool output with a secret through."""
    assert SCANNER.could_change(text), kind
    assert SCANNER._prefilter.admits(text), kind


@pytest.mark.parametrize(("kind", "text"), LOOKALIKES, ids=[k for k, _ in LOOKALIKES])
def test_no_lookalike_of_the_corpus_is_touched(kind: str, text: str) -> None:
    """Digests, identifiers, public keys, image data and placeholders come back as they were."""
    assert SCANNER.redact(text) == (text, {})


@pytest.mark.parametrize(("kind", "text"), MISSED, ids=[k for k, _ in MISSED])
def test_the_misses_the_readme_names_are_still_missed(kind: str, text: str) -> None:
    """What the README's table says is not found (base64 values, prose) is indeed left."""
    assert SCANNER.redact(text) == (text, {})


_NAME_WORDS = ("PASSWORD", "PASSWD", "SECRET", "SECRET_KEY", "API_KEY", "APIKEY", "TOKEN")
_VALUE = st.text(string.ascii_letters + string.digits + "!#%&()*+,-./:;=?@[]^_{|}~", min_size=6)


@settings(derandomize=True, deadline=None, max_examples=300)
@given(
    st.from_regex(r"\A(?:[A-Z][A-Z0-9]*_)?\Z"),
    st.sampled_from(_NAME_WORDS),
    _VALUE.filter(
        lambda v: (
            v[:1] not in "{%"
            and not {"...", "xxxx", "XXXX", "***"}
            & {v[i : i + n] for n in (3, 4) for i in range(min(len(v), 41))}
        )
    ),
    st.sampled_from(["", '"', "'"]),
    st.sampled_from(["", "export ", "-e ", "  "]),
)
def test_any_env_line_with_a_secret_name_loses_its_value(
    prefix: str, word: str, value: str, quote: str, lead: str
) -> None:
    """A NAME=value line whose name ends in a secret's word keeps its name, not its value."""
    line = f"{lead}{prefix}{word}={quote}{value}{quote}\n"
    redacted, _ = SCANNER.redact(f"$ env\nHOME=/home/dev\n{line}")
    assert f"{prefix}{word}={quote}[REDACTED:" in redacted
    assert value not in redacted or len(value) < 6


@settings(derandomize=True, deadline=None, max_examples=200)
@given(
    st.from_regex(r"\A[A-Z][A-Z0-9_]{0,20}\Z").filter(lambda name: not name.endswith(_NAME_WORDS)),
    st.text(string.hexdigits, min_size=6, max_size=64),
)
def test_an_env_line_whose_name_is_no_secret_is_left_alone(name: str, value: str) -> None:
    """A NAME=<digest> line keeps its value when the name does not end in a secret's word."""
    text = f"{name}={value}\n"
    assert SCANNER.redact(text) == (text, {})
