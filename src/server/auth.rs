//! Optional challenge–response authentication (HMAC-SHA256, RustCrypto `hmac` + `sha2`):
//! the server's keys file (`--auth-keys`), the client's credentials (`--auth USER` with
//! the secret from `PINPERF_SECRET` or `--auth-secret-file`), and the MAC both compute.
//!
//! Exchange, after Hello/Welcome and before Params (on the `control` thread each side):
//! client `AuthRequest{user, nonce_c}` → server `Challenge{nonce_s}` (fresh, random) →
//! client `AuthProof{mac}` → client `Params`. The MAC covers a version label, the user,
//! both nonces and the Params frame's body exactly as sent, so a recorded exchange replayed
//! meets a new `nonce_s` and fails, and changed parameters fail too. The server compares in
//! constant time and answers every failure with the same words, [`FAILED`]; only its log
//! says which part failed. A client that sent no credentials at all hears [`REQUIRED`].
//! Secrets never cross the wire.

use std::collections::HashMap;
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{Error, Result};
use crate::wire::{Control, ControlMsg, TestParams};

/// What a client hears on any authentication failure, whatever the cause.
pub const FAILED: &str = "authentication failed";
/// What a client that sent no credentials hears: nothing to guess at, so the fix.
pub const REQUIRED: &str = "this server requires authentication: give --auth USER (its secret \
                            in PINPERF_SECRET or --auth-secret-file)";
/// Bytes in each side's nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes in the MAC (HMAC-SHA256).
pub const MAC_LEN: usize = 32;
/// Longest user name accepted (keys file and wire).
pub const MAX_USER: usize = 64;
/// The environment variable a client's secret may come from.
pub const SECRET_ENV: &str = "PINPERF_SECRET";
/// Domain separation: a MAC made for anything else never verifies here.
const LABEL: &[u8] = b"pinperf auth v1\0";

type HmacSha256 = Hmac<Sha256>;

/// `n` bytes from the operating system's random source.
pub fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b)
        .map_err(|e| Error::Test(format!("read the system's random source: {e}")))?;
    Ok(b)
}

/// The MAC over the label, user, both nonces and the Params frame body as sent.
pub fn mac(
    secret: &[u8],
    user: &str,
    server_nonce: &[u8; NONCE_LEN],
    client_nonce: &[u8; NONCE_LEN],
    params_body: &[u8],
) -> [u8; MAC_LEN] {
    keyed(secret, user, server_nonce, client_nonce, params_body)
        .finalize()
        .into_bytes()
        .into()
}

fn keyed(
    secret: &[u8],
    user: &str,
    server_nonce: &[u8; NONCE_LEN],
    client_nonce: &[u8; NONCE_LEN],
    params_body: &[u8],
) -> HmacSha256 {
    // HMAC takes keys of any length.
    let mut m = HmacSha256::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    m.update(LABEL);
    m.update(&(user.len() as u32).to_be_bytes());
    m.update(user.as_bytes());
    m.update(server_nonce);
    m.update(client_nonce);
    m.update(params_body);
    m
}

/// Checks `claimed` against the MAC in constant time (`hmac`'s `verify_slice`, `subtle`).
pub fn verify(
    secret: &[u8],
    user: &str,
    server_nonce: &[u8; NONCE_LEN],
    client_nonce: &[u8; NONCE_LEN],
    params_body: &[u8],
    claimed: &[u8],
) -> bool {
    keyed(secret, user, server_nonce, client_nonce, params_body)
        .verify_slice(claimed)
        .is_ok()
}

/// Lower-case hex.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Exactly `N` bytes of hex, or `None`.
pub fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let t = text.as_bytes();
    if t.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; N];
    for (i, pair) in t.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// The server's users and secrets, from `--auth-keys FILE`.
#[derive(Clone, Default)]
pub struct Keys {
    users: HashMap<String, Vec<u8>>,
    /// A key to compute a MAC with for an unknown user, so the answer takes as long.
    decoy: Vec<u8>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys({} user(s), secrets hidden)", self.users.len())
    }
}

impl Keys {
    /// Reads a keys file: one `USER:SECRET` per line, `#` comments and blank lines
    /// ignored. Refuses a file every user may read, naming the fix.
    pub fn load(path: &Path) -> Result<Keys> {
        use std::os::unix::fs::PermissionsExt;
        let shown = path.display();
        let meta = std::fs::metadata(path)
            .map_err(|e| Error::Usage(format!("--auth-keys {shown}: {e}")))?;
        let mode = meta.permissions().mode();
        if mode & 0o004 != 0 {
            return Err(Error::Usage(format!(
                "--auth-keys {shown}: readable by every user (mode {:04o}); its secrets must \
                 not be: run `chmod o-rwx {shown}`",
                mode & 0o7777
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Usage(format!("--auth-keys {shown}: {e}")))?;
        Keys::parse(&text).map_err(|why| Error::Usage(format!("--auth-keys {shown}: {why}")))
    }

    /// Parses the keys file's text.
    pub fn parse(text: &str) -> std::result::Result<Keys, String> {
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let n = i + 1;
            let Some((user, secret)) = line.split_once(':') else {
                return Err(format!("line {n}: expected USER:SECRET"));
            };
            check_user(user).map_err(|why| format!("line {n}: {why}"))?;
            if secret.is_empty() {
                return Err(format!("line {n}: user {user:?} has an empty secret"));
            }
            if users
                .insert(user.to_string(), secret.as_bytes().to_vec())
                .is_some()
            {
                return Err(format!("line {n}: user {user:?} appears twice"));
            }
        }
        if users.is_empty() {
            return Err("no USER:SECRET line: every client would be refused".into());
        }
        Ok(Keys {
            users,
            decoy: random_bytes::<32>().map_err(|e| e.to_string())?.to_vec(),
        })
    }

    /// The user's secret, or for an unknown user a random one (so failure costs the same)
    /// and false.
    pub fn secret(&self, user: &str) -> (&[u8], bool) {
        match self.users.get(user) {
            Some(s) => (s, true),
            None => (&self.decoy, false),
        }
    }
}

/// A user name as the keys file and the wire allow it: 1 to [`MAX_USER`] characters, no
/// `:`, no whitespace or control characters.
pub fn check_user(user: &str) -> std::result::Result<(), String> {
    if user.is_empty() || user.len() > MAX_USER {
        return Err(format!("user names are 1 to {MAX_USER} bytes"));
    }
    if user
        .chars()
        .any(|c| c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "user {user:?}: no ':', spaces or control characters"
        ));
    }
    Ok(())
}

/// A client's credentials (`--auth USER` and its secret).
#[derive(Clone)]
pub struct ClientAuth {
    pub user: String,
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClientAuth({}, secret hidden)", self.user)
    }
}

impl ClientAuth {
    /// `--auth USER` with `--auth-secret-file FILE`, or else `PINPERF_SECRET`.
    pub fn new(user: &str, secret_file: Option<&Path>, env: Option<String>) -> Result<ClientAuth> {
        check_user(user).map_err(|why| Error::Usage(format!("--auth {user}: {why}")))?;
        let secret = match (secret_file, env) {
            (Some(path), _) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::Usage(format!("--auth-secret-file {}: {e}", path.display()))
                })?;
                text.trim_end_matches(['\n', '\r']).to_string()
            }
            (None, Some(s)) => s,
            (None, None) => {
                return Err(Error::Usage(format!(
                    "--auth {user}: no secret: set {SECRET_ENV} or give --auth-secret-file FILE"
                )));
            }
        };
        if secret.is_empty() {
            return Err(Error::Usage(format!(
                "--auth {user}: the secret is empty (from {})",
                secret_file.map_or(SECRET_ENV.to_string(), |p| p.display().to_string())
            )));
        }
        Ok(ClientAuth {
            user: user.to_string(),
            secret: secret.into_bytes(),
        })
    }
}

/// The client's side of the exchange, between Welcome and Params: asks for a challenge,
/// answers it with the MAC over `test` as it will be sent. Does nothing without `--auth`.
/// `recv` reads the server's next message (the client's handshake step, which also
/// watches for a stop signal).
pub(crate) fn client_step(
    ctl: &Control,
    auth: Option<&ClientAuth>,
    test: &TestParams,
    recv: impl FnOnce(&Control) -> Result<ControlMsg>,
) -> Result<()> {
    let Some(auth) = auth else {
        return Ok(());
    };
    let peer = ctl.peer;
    let client_nonce = random_bytes::<NONCE_LEN>()?;
    ctl.send(&ControlMsg::AuthRequest {
        user: auth.user.clone(),
        nonce: to_hex(&client_nonce),
    })?;
    let server_nonce = match recv(ctl)? {
        ControlMsg::Challenge { nonce } => {
            from_hex::<NONCE_LEN>(&nonce).ok_or_else(|| Error::Protocol {
                peer,
                what: "the server's challenge is not 32 bytes of hex".into(),
            })?
        }
        ControlMsg::Refuse { reason } => {
            let reason = crate::wire::printable(&reason, usize::MAX);
            return Err(Error::Refused { peer, reason });
        }
        other => return Err(other.unexpected(peer, "challenge")),
    };
    let body = crate::wire::params_body(test);
    let proof = mac(
        &auth.secret,
        &auth.user,
        &server_nonce,
        &client_nonce,
        &body,
    );
    ctl.send(&ControlMsg::AuthProof {
        mac: to_hex(&proof),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_file_lines_and_their_errors() {
        let k = Keys::parse("# users\n\nalice:s3cret\n  bob:x:y  \n").unwrap();
        assert_eq!(k.secret("alice"), (&b"s3cret"[..], true));
        assert_eq!(
            k.secret("bob"),
            (&b"x:y"[..], true),
            "a secret may hold ':'"
        );
        assert!(!k.secret("carol").1);
        for (text, err) in [
            ("alice", "line 1: expected USER:SECRET"),
            ("a:1\n# c\na:2", "line 3: user \"a\" appears twice"),
            (":x", "line 1: user names are 1 to 64 bytes"),
            (
                "a b:x",
                "line 1: user \"a b\": no ':', spaces or control characters",
            ),
            ("a:", "line 1: user \"a\" has an empty secret"),
            (
                "# none\n",
                "no USER:SECRET line: every client would be refused",
            ),
        ] {
            assert_eq!(Keys::parse(text).unwrap_err(), err, "{text:?}");
        }
    }

    #[test]
    fn the_mac_binds_user_nonces_and_parameters() {
        let (s, c) = ([1u8; 32], [2u8; 32]);
        let good = mac(b"k", "alice", &s, &c, b"{\"streams\":1}");
        assert!(verify(b"k", "alice", &s, &c, b"{\"streams\":1}", &good));
        assert!(!verify(b"K", "alice", &s, &c, b"{\"streams\":1}", &good));
        assert!(!verify(b"k", "alicf", &s, &c, b"{\"streams\":1}", &good));
        assert!(!verify(
            b"k",
            "alice",
            &[3; 32],
            &c,
            b"{\"streams\":1}",
            &good
        ));
        assert!(!verify(
            b"k",
            "alice",
            &s,
            &[3; 32],
            b"{\"streams\":1}",
            &good
        ));
        assert!(!verify(b"k", "alice", &s, &c, b"{\"streams\":2}", &good));
        assert!(!verify(
            b"k",
            "alice",
            &s,
            &c,
            b"{\"streams\":1}",
            &good[..31]
        ));
    }

    #[test]
    fn hex_round_trips_and_rejects_the_wrong_length_or_digits() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(to_hex(&b), "0001abff");
        assert_eq!(from_hex::<4>("0001ABff"), Some(b));
        assert_eq!(from_hex::<4>("0001abf"), None);
        assert_eq!(from_hex::<4>("0001abfg"), None);
        assert_eq!(from_hex::<2>("é1"), None);
    }

    #[test]
    fn client_secret_comes_from_the_file_or_the_environment() {
        let err = ClientAuth::new("alice", None, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--auth alice: no secret: set PINPERF_SECRET or give --auth-secret-file FILE"
        );
        let a = ClientAuth::new("alice", None, Some("pw".into())).unwrap();
        assert_eq!(a.secret, b"pw");
        assert!(ClientAuth::new("a:b", None, Some("pw".into())).is_err());
    }
}
