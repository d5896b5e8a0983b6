//! iperf3's username/password authentication: the client encrypts `user`, `pwd` and `ts`
//! (Unix seconds) with the server's RSA public key and sends it, base64, as the
//! parameters' `authtoken`; the server decrypts it with its private key, checks the time
//! against its skew threshold and the user against its authorized-users file (`user,hex`
//! lines, the hex being SHA-256 of `{user}password`). OAEP (SHA-1, iperf3 3.17 and later)
//! by default; PKCS#1 v1.5 with `--use-pkcs1-padding`, for peers before 3.17. The RSA is
//! the `rsa` crate's; its decryption is not constant-time (RUSTSEC-2023-0071), which this
//! scheme, a gate on a test server, accepts.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::{DecodePrivateKey, DecodePublicKey};
use rsa::{Oaep, Pkcs1v15Encrypt, RsaPrivateKey, RsaPublicKey};
use sha2::{Digest, Sha256};

use crate::cli::Args;

/// `--use-pkcs1-padding`'s choice.
fn padding(args: &Args) -> Padding {
    match args.use_pkcs1_padding {
        true => Padding::Pkcs1,
        false => Padding::Oaep,
    }
}

/// `--username`, `--rsa-public-key-path` and `$IPERF3_PASSWORD`: a client's credentials
/// for an iperf3 server (pinperf's own authenticate with `--auth`). A server's options
/// here are refused, not ignored.
pub fn credentials(args: &Args) -> Result<Option<Credentials>, String> {
    if let Some(flag) = given(&[
        (
            args.rsa_private_key_path.is_some(),
            "--rsa-private-key-path",
        ),
        (
            args.authorized_users_path.is_some(),
            "--authorized-users-path",
        ),
        (args.time_skew_threshold.is_some(), "--time-skew-threshold"),
    ]) {
        return Err(format!(
            "{flag}: a server option (-s); a client gives --username and --rsa-public-key-path"
        ));
    }
    let (Some(user), Some(key)) = (&args.username, &args.rsa_public_key_path) else {
        if args.use_pkcs1_padding {
            return Err(
                "--use-pkcs1-padding: pads iperf3's credentials; give --username and \
                 --rsa-public-key-path"
                    .into(),
            );
        }
        return Ok(None);
    };
    if args.auth.is_some() {
        return Err("--username and --auth: iperf3's credentials or pinperf's, not both".into());
    }
    if args.target.peer != crate::choices::Peer::Iperf3 {
        return Err(
            "--username: iperf3's credentials are for an iperf3 server; add --peer iperf3".into(),
        );
    }
    let password = std::env::var(PASSWORD_ENV).map_err(|_| {
        format!(
            "--username {user}: the password comes from ${PASSWORD_ENV} (set it for this command)"
        )
    })?;
    Credentials::load(user, &password, key, padding(args)).map(Some)
}

/// `--rsa-private-key-path`, `--authorized-users-path` and `--time-skew-threshold`: a
/// server's gate for iperf3's clients, read now so a mistake stops it before it serves.
/// A client's options here are refused, not ignored.
pub fn gate(args: &Args) -> Result<Option<std::sync::Arc<Gate>>, String> {
    if let Some(flag) = given(&[
        (args.username.is_some(), "--username"),
        (args.rsa_public_key_path.is_some(), "--rsa-public-key-path"),
    ]) {
        return Err(format!(
            "{flag}: a client option; a server takes --rsa-private-key-path and \
             --authorized-users-path"
        ));
    }
    let (Some(key), Some(users)) = (&args.rsa_private_key_path, &args.authorized_users_path) else {
        if args.use_pkcs1_padding || args.time_skew_threshold.is_some() {
            return Err(
                "--use-pkcs1-padding and --time-skew-threshold: for iperf3's credentials; \
                 give --rsa-private-key-path and --authorized-users-path"
                    .into(),
            );
        }
        return Ok(None);
    };
    let skew = args.time_skew_threshold.unwrap_or(SKEW_SECS);
    Gate::load(key, users, skew, padding(args)).map(|g| Some(g.into()))
}

/// iperf3's default `--time-skew-threshold`, in seconds.
const SKEW_SECS: u64 = 10;

/// The first flag given of `flags`.
fn given(flags: &[(bool, &'static str)]) -> Option<&'static str> {
    flags.iter().find(|(g, _)| *g).map(|(_, f)| *f)
}

/// How the token is padded before RSA: both ends must agree (it is not negotiated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// OAEP with SHA-1 (iperf3 3.17 and later).
    Oaep,
    /// PKCS#1 v1.5 (before 3.17; `--use-pkcs1-padding`).
    Pkcs1,
}

/// Where an iperf3 client takes its password from.
pub const PASSWORD_ENV: &str = "IPERF3_PASSWORD";

/// A client's credentials: who, the password, and the server's public key.
#[derive(Clone)]
pub struct Credentials {
    pub user: String,
    password: String,
    key: RsaPublicKey,
    pub padding: Padding,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("padding", &self.padding)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// `--username`, the password (`IPERF3_PASSWORD`), and the PEM public key at `key`
    /// (`--rsa-public-key-path`).
    pub fn load(user: &str, password: &str, key: &Path, padding: Padding) -> Result<Self, String> {
        let pem = std::fs::read_to_string(key)
            .map_err(|e| format!("--rsa-public-key-path {}: {e}", key.display()))?;
        let key = RsaPublicKey::from_public_key_pem(&pem).map_err(|e| {
            format!(
                "--rsa-public-key-path {}: not a PEM public key ({e})",
                key.display()
            )
        })?;
        Ok(Credentials {
            user: user.into(),
            password: password.into(),
            key,
            padding,
        })
    }

    /// The `authtoken` for a test starting at `now` (Unix seconds).
    pub fn token(&self, now: u64) -> Result<String, String> {
        let plain = format!("user: {}\npwd:  {}\nts:   {now}", self.user, self.password);
        let mut rng = rand_core::OsRng;
        let sealed = match self.padding {
            Padding::Oaep => {
                self.key
                    .encrypt(&mut rng, Oaep::new::<sha1::Sha1>(), plain.as_bytes())
            }
            Padding::Pkcs1 => self
                .key
                .encrypt(&mut rng, Pkcs1v15Encrypt, plain.as_bytes()),
        }
        .map_err(|e| format!("--username {}: the token does not encrypt ({e})", self.user))?;
        Ok(BASE64.encode(sealed))
    }
}

/// A server's side: its private key, the users file, the skew it allows.
pub struct Gate {
    key: RsaPrivateKey,
    users: std::path::PathBuf,
    pub skew_secs: u64,
    pub padding: Padding,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("users", &self.users)
            .field("skew_secs", &self.skew_secs)
            .field("padding", &self.padding)
            .finish_non_exhaustive()
    }
}

/// Why a token was refused; iperf3's return codes in its debug line.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not base64, not decryptable with this key and padding, or not iperf3's fields.
    Unreadable,
    /// `ts` further from this host's clock than the threshold (code 1).
    Skewed { user: String, by_secs: u64 },
    /// The users file cannot be read (code 2).
    NoUsers(String),
    /// No line of the file has this user and password (code 3).
    Unknown { user: String },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Unreadable => write!(f, "an auth token this server's key cannot read"),
            Refusal::Skewed { user, by_secs } => write!(
                f,
                "user '{user}': the token's time is {by_secs} s from this server's clock"
            ),
            Refusal::NoUsers(why) => write!(f, "the authorized users file: {why}"),
            Refusal::Unknown { user } => write!(f, "user '{user}': unknown, or a wrong password"),
        }
    }
}

impl Gate {
    /// `--rsa-private-key-path` (PEM, PKCS#1 or PKCS#8) and `--authorized-users-path`,
    /// both read now so that a mistake stops the server before it serves.
    pub fn load(
        key: &Path,
        users: &Path,
        skew_secs: u64,
        padding: Padding,
    ) -> Result<Gate, String> {
        let pem = std::fs::read_to_string(key)
            .map_err(|e| format!("--rsa-private-key-path {}: {e}", key.display()))?;
        let key = RsaPrivateKey::from_pkcs8_pem(&pem)
            .or_else(|_| RsaPrivateKey::from_pkcs1_pem(&pem))
            .map_err(|e| {
                format!(
                    "--rsa-private-key-path {}: not an unencrypted PEM private key ({e})",
                    key.display()
                )
            })?;
        std::fs::read_to_string(users)
            .map_err(|e| format!("--authorized-users-path {}: {e}", users.display()))?;
        if skew_secs == 0 {
            return Err("--time-skew-threshold 0: must be at least 1 second".into());
        }
        Ok(Gate {
            key,
            users: users.into(),
            skew_secs,
            padding,
        })
    }

    /// The user a token from a test starting around `now` (Unix seconds) speaks for.
    pub fn check(&self, token: &str, now: u64) -> Result<String, Refusal> {
        let sealed = BASE64
            .decode(token.trim())
            .map_err(|_| Refusal::Unreadable)?;
        let plain = match self.padding {
            Padding::Oaep => self.key.decrypt(Oaep::new::<sha1::Sha1>(), &sealed),
            Padding::Pkcs1 => self.key.decrypt(Pkcs1v15Encrypt, &sealed),
        }
        .map_err(|_| Refusal::Unreadable)?;
        let plain = String::from_utf8(plain).map_err(|_| Refusal::Unreadable)?;
        let (user, password, ts) = fields(&plain).ok_or(Refusal::Unreadable)?;
        let by_secs = now.abs_diff(ts);
        if by_secs > self.skew_secs {
            return Err(Refusal::Skewed { user, by_secs });
        }
        let users = std::fs::read_to_string(&self.users)
            .map_err(|e| Refusal::NoUsers(format!("{}: {e}", self.users.display())))?;
        match known(&users, &user, &password) {
            true => Ok(user),
            false => Err(Refusal::Unknown { user }),
        }
    }
}

/// `user: U\npwd:  P\nts:   T` as iperf3 writes it.
fn fields(plain: &str) -> Option<(String, String, u64)> {
    let mut lines = plain.lines();
    let user = lines.next()?.strip_prefix("user: ")?;
    let password = lines.next()?.strip_prefix("pwd:  ")?;
    let ts = lines.next()?.strip_prefix("ts:   ")?.trim().parse().ok()?;
    Some((user.into(), password.into(), ts))
}

/// Whether `users` (iperf3's file: `user,hex` lines; `#` comments) has this user with the
/// SHA-256 of `{user}password`.
fn known(users: &str, user: &str, password: &str) -> bool {
    let hash: String = Sha256::digest(format!("{{{user}}}{password}"))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    users
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(','))
        .any(|(u, h)| u == user && h.trim().eq_ignore_ascii_case(&hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test key pair (PKCS#1 private, SubjectPublicKeyInfo public), made with openssl.
    const PRIVATE: &str = include_str!("../../tests/fixtures/iperf3-auth/private.pem");
    const PUBLIC: &str = include_str!("../../tests/fixtures/iperf3-auth/public.pem");

    /// A directory of this test's own, removed at the end.
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let dir =
                std::env::temp_dir().join(format!("pinperf-auth-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }

        fn file(&self, name: &str) -> std::path::PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn files(name: &str, users: &str) -> (Dir, Gate, Credentials) {
        let dir = Dir::new(name);
        let (key, public, list) = (dir.file("k"), dir.file("p"), dir.file("u"));
        std::fs::write(&key, PRIVATE).unwrap();
        std::fs::write(&public, PUBLIC).unwrap();
        std::fs::write(&list, users).unwrap();
        let gate = Gate::load(&key, &list, 10, Padding::Oaep).unwrap();
        let who = Credentials::load("mary", "secret", &public, Padding::Oaep).unwrap();
        (dir, gate, who)
    }

    /// The users file's line for `mary`/`secret`, as iperf3's docs make it
    /// (`echo -n "{mary}secret" | sha256sum`).
    const MARY: &str = "mary,59b1e3926df43210f99dc35bb702ae3124ed161c9f739636f5f1816b37190873";

    #[test]
    fn a_token_opens_for_its_user_within_the_skew() {
        let (_dir, gate, who) = files("opens", &format!("# users\n\n{MARY}\r\n"));
        let token = who.token(1000).unwrap();
        assert_eq!(gate.check(&token, 1005), Ok("mary".into()));
        assert_eq!(
            gate.check(&token, 1011),
            Err(Refusal::Skewed {
                user: "mary".into(),
                by_secs: 11
            })
        );
        assert_eq!(gate.check("not base64!", 1000), Err(Refusal::Unreadable));
        // The other padding does not open it: both ends must agree.
        let pkcs1 = Gate {
            padding: Padding::Pkcs1,
            ..gate
        };
        assert_eq!(pkcs1.check(&token, 1000), Err(Refusal::Unreadable));
    }

    /// Each end's options in the other's mode are refused by name, never ignored.
    #[test]
    fn the_other_ends_options_are_refused() {
        use clap::Parser;
        let args = |argv: &[&str]| {
            let all = std::iter::once("pinperf").chain(argv.iter().copied());
            crate::cli::Args::try_parse_from(all).unwrap()
        };
        let client = credentials(&args(&["-c", "h", "--time-skew-threshold", "5"]));
        assert!(
            client
                .unwrap_err()
                .starts_with("--time-skew-threshold: a server option")
        );
        let client = credentials(&args(&["-c", "h", "--use-pkcs1-padding"]));
        assert!(client.unwrap_err().contains("give --username"));
        let server = gate(&args(&[
            "-s",
            "--username",
            "u",
            "--rsa-public-key-path",
            "k",
        ]));
        assert!(
            server
                .unwrap_err()
                .starts_with("--username: a client option")
        );
        assert!(gate(&args(&["-s", "--use-pkcs1-padding"])).is_err());
        assert!(matches!(gate(&args(&["-s"])), Ok(None)));
    }

    #[test]
    fn a_wrong_password_or_user_is_unknown() {
        let (dir, gate, _) = files("wrong", MARY);
        let public = dir.file("p");
        let wrong = Credentials::load("mary", "guess", &public, Padding::Oaep).unwrap();
        assert_eq!(
            gate.check(&wrong.token(7).unwrap(), 7),
            Err(Refusal::Unknown {
                user: "mary".into()
            })
        );
        assert!(Credentials::load("mary", "x", &dir.file("k"), Padding::Oaep).is_err());
    }
}
