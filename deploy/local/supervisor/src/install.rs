//! What `up` installs when it is missing: a Java 17 and `redis-server` (apt, as root), and the
//! Kafka and Cassandra jars (Maven, into the cache; `maven` itself from apt if need be).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use anyhow::{bail, Context};

use crate::layout::{
    Settings, CASSANDRA_VERSION, DEPENDENCY_PLUGIN, KAFKA_VERSION, RELOAD4J_VERSION, SCALA_VERSION,
    SLF4J_RELOAD4J_VERSION,
};
use crate::log;
use crate::logfile::last_lines;

/// apt-get runs one at a time from this process, and `apt-get update` runs at most once.
static APT: Mutex<bool> = Mutex::new(false);

/// `apt-get install -y -q <packages>` (after one `apt-get update`), output into `log_file`.
/// While it runs, a `/usr/sbin/policy-rc.d` that forbids starting services is put in place
/// unless the image has one, so Debian's maintainer scripts do not start a system Redis.
///
/// # Errors
///
/// Not root, or apt-get failed (its output is in `log_file`).
pub fn apt_install(packages: &[&str], log_file: &Path) -> anyhow::Result<()> {
    if !rustix::process::geteuid().is_root() {
        bail!("need root to apt-get install {} (or install it yourself)", packages.join(" "));
    }
    let mut updated = APT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let policy = Path::new("/usr/sbin/policy-rc.d");
    let made_policy = !policy.exists() && {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::write(policy, "#!/bin/sh\nexit 101\n")
            .and_then(|()| std::fs::set_permissions(policy, std::fs::Permissions::from_mode(0o755)))
            .is_ok()
    };
    let apt = |args: &[&str]| -> anyhow::Result<bool> {
        let out = File::options().create(true).append(true).open(log_file)?;
        Ok(Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["-o", "DPkg::Lock::Timeout=300"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .status()
            .context("running apt-get")?
            .success())
    };
    let result = (|| {
        if !*updated && !apt(&["update", "-q"])? {
            bail!("apt-get update failed");
        }
        let mut args = vec!["install", "-y", "-q"];
        args.extend_from_slice(packages);
        if !apt(&args)? {
            bail!("apt-get install {} failed", packages.join(" "));
        }
        Ok(())
    })();
    *updated = true;
    if made_policy {
        let _ = std::fs::remove_file(policy);
    }
    result
}

/// Whether `cmd` is an executable file on `PATH`.
pub fn on_path(cmd: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .any(|d| std::fs::metadata(d.join(cmd)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
    })
}

/// The places a Java 17 is looked for, in order: `QIM_JAVA17_HOME`, Debian's amd64 path, then
/// `/usr/lib/jvm/java-17-openjdk-*` and `/usr/lib/jvm/*17*` (each sorted, as a shell glob).
pub fn java_candidates(explicit: Option<&Path>, jvm_dir_entries: &[String]) -> Vec<PathBuf> {
    let jvm = Path::new("/usr/lib/jvm");
    let mut sorted = jvm_dir_entries.to_vec();
    sorted.sort();
    let mut out: Vec<PathBuf> = explicit.map(Path::to_path_buf).into_iter().collect();
    out.push(jvm.join("java-17-openjdk-amd64"));
    out.extend(sorted.iter().filter(|n| n.starts_with("java-17-openjdk-")).map(|n| jvm.join(n)));
    out.extend(sorted.iter().filter(|n| n.contains("17")).map(|n| jvm.join(n)));
    out
}

/// Whether the first line of `java -version` is a Java 17's (`version "17.` or `version "17"`).
pub fn is_java17(version_line: &str) -> bool {
    version_line.contains("version \"17.") || version_line.contains("version \"17\"")
}

/// The home of a Java 17 on this machine, if there is one.
pub fn find_java17(settings: &Settings) -> Option<PathBuf> {
    let entries: Vec<String> = std::fs::read_dir("/usr/lib/jvm")
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    java_candidates(settings.java17_home.as_deref(), &entries).into_iter().find(|home| {
        let java = home.join("bin/java");
        java.is_file()
            && Command::new(&java)
                .arg("-version")
                .stdin(Stdio::null())
                .output()
                .is_ok_and(|o| is_java17(String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or_default()))
    })
}

/// The Java 17 home, installing `openjdk-17-jdk-headless` first if there is none.
pub fn ensure_java(settings: &Settings) -> anyhow::Result<PathBuf> {
    if let Some(home) = find_java17(settings) {
        return Ok(home);
    }
    log!("no Java 17 found: installing openjdk-17-jdk-headless");
    let log_file = settings.stack_dir.join("install-java.log");
    apt_logged(&["openjdk-17-jdk-headless"], &log_file)?;
    find_java17(settings).context("Java 17 still not found after install")
}

/// `redis-server` and `redis-cli`, installed (package `redis-server`) unless both are on `PATH`.
pub fn ensure_redis_binary(settings: &Settings) -> anyhow::Result<()> {
    if on_path("redis-server") && on_path("redis-cli") {
        return Ok(());
    }
    log!("redis-server not found: apt-get update && apt-get install -y redis-server");
    apt_logged(&["redis-server"], &settings.stack_dir.join("install-redis.log"))?;
    let version = Command::new("redis-server").arg("--version").output().map_or_else(
        |_| String::new(),
        |o| String::from_utf8_lossy(&o.stdout).split_whitespace().nth(2).unwrap_or_default().to_owned(),
    );
    log!("redis-server installed ({version})");
    Ok(())
}

/// [`apt_install`]; on failure the log's last 30 lines go to stderr first.
fn apt_logged(packages: &[&str], log_file: &Path) -> anyhow::Result<()> {
    let _ = std::fs::remove_file(log_file);
    apt_install(packages, log_file).inspect_err(|_| eprint!("{}", last_lines(log_file, 30)))
}

/// A Maven project whose runtime dependencies are `deps` (`group:artifact:version` each).
pub fn render_pom(name: &str, deps: &[String]) -> String {
    let mut pom =
        String::from("<project xmlns=\"http://maven.apache.org/POM/4.0.0\">\n  <modelVersion>4.0.0</modelVersion>\n");
    pom += &format!(
        "  <groupId>qim.stack</groupId><artifactId>{name}</artifactId><version>0</version><packaging>pom</packaging>\n"
    );
    pom += "  <dependencies>\n";
    for dep in deps {
        let mut parts = dep.splitn(3, ':');
        let (g, a, v) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        pom += &format!(
            "    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>\n"
        );
    }
    pom += "  </dependencies>\n</project>\n";
    pom
}

/// Resolves the runtime classpath of `deps` with Maven into `lib` (`<cache>/<name>-<v>/lib`),
/// once: a `.complete` stamp beside it says it is there. Downloads happen under the cache's
/// `.fetch.lock` into a temporary dir that is renamed into place, so a crash leaves no half.
pub fn fetch_libs(
    settings: &Settings,
    java_home: &Path,
    name: &str,
    lib: &Path,
    deps: &[String],
) -> anyhow::Result<()> {
    let top = lib.parent().context("a lib dir without parent")?;
    let complete = top.join(".complete");
    if complete.is_file() {
        return Ok(());
    }
    let cache = &settings.cache_dir;
    std::fs::create_dir_all(cache.join("logs"))?;
    let lock = File::create(cache.join(".fetch.lock"))?;
    lock.lock().context("locking the download cache")?;
    if complete.is_file() {
        return Ok(());
    }
    if !on_path("mvn") {
        log!("mvn not found: installing maven");
        apt_install(&["maven"], &cache.join("logs/install-maven.log")).context("apt-get install maven failed")?;
    }
    let mut tmp = top.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let pom = tmp.join("pom.xml");
    std::fs::write(&pom, render_pom(name, deps))?;
    let mlog = cache.join(format!("logs/mvn-{name}.log"));
    log!("downloading {name} jars from Maven Central (log: {})", mlog.display());
    let out = File::create(&mlog)?;
    let ok = Command::new("mvn")
        .env("JAVA_HOME", java_home)
        .args(["-B", "-q", "-f"])
        .arg(&pom)
        .arg(format!("-Dmaven.repo.local={}", cache.join("m2").display()))
        .arg(format!("{DEPENDENCY_PLUGIN}:copy-dependencies"))
        .arg("-DincludeScope=runtime")
        .arg(format!("-DoutputDirectory={}", tmp.join("lib").display()))
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .status()
        .context("running mvn")?
        .success();
    if !ok {
        eprint!("{}", last_lines(&mlog, 40));
        bail!("Maven could not resolve {name}");
    }
    let jars = jar_sizes(&tmp.join("lib"));
    if jars.is_empty() {
        bail!("Maven copied no jar for {name}");
    }
    File::create(tmp.join(".complete"))?;
    let _ = std::fs::remove_dir_all(top);
    std::fs::rename(&tmp, top).with_context(|| format!("moving {} into place", tmp.display()))?;
    let bytes: u64 = jars.iter().sum();
    log!("{name}: {} jars, {} in {}", jars.len(), human_size(bytes), lib.display());
    Ok(())
}

/// The Cassandra jars ([`fetch_libs`] of `cassandra-all`).
pub fn fetch_cassandra(settings: &Settings, java_home: &Path) -> anyhow::Result<()> {
    let deps = [format!("org.apache.cassandra:cassandra-all:{CASSANDRA_VERSION}")];
    fetch_libs(settings, java_home, "cassandra", &settings.cassandra_lib(), &deps)
}

/// The Kafka jars: the broker, its admin tools and a logging backend ([`fetch_libs`]).
pub fn fetch_kafka(settings: &Settings, java_home: &Path) -> anyhow::Result<()> {
    let deps = [
        format!("org.apache.kafka:kafka_{SCALA_VERSION}:{KAFKA_VERSION}"),
        format!("org.apache.kafka:kafka-tools:{KAFKA_VERSION}"),
        format!("ch.qos.reload4j:reload4j:{RELOAD4J_VERSION}"),
        format!("org.slf4j:slf4j-reload4j:{SLF4J_RELOAD4J_VERSION}"),
    ];
    fetch_libs(settings, java_home, "kafka", &settings.kafka_lib(), &deps)
}

/// The sizes of the `*.jar` files in `dir`.
fn jar_sizes(dir: &Path) -> Vec<u64> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "jar"))
                .filter_map(|e| e.metadata().ok().map(|m| m.len()))
                .collect()
        })
        .unwrap_or_default()
}

/// A size as `du -h` writes it: powers of 1024, rounded up, one decimal below 10.
pub fn human_size(bytes: u64) -> String {
    let mut value = bytes as f64;
    let mut unit = 0;
    const UNITS: [&str; 5] = ["", "K", "M", "G", "T"];
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes}")
    } else if value < 10.0 {
        format!("{:.1}{}", (value * 10.0).ceil() / 10.0, UNITS[unit])
    } else {
        format!("{}{}", value.ceil() as u64, UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_is_looked_for_in_the_documented_order() {
        let entries = ["temurin-25-jdk-amd64".to_owned(), "java-17-openjdk-arm64".into(), "jdk-17.0.2".into()];
        let c = java_candidates(Some(Path::new("/opt/j17")), &entries);
        let c: Vec<_> = c.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        assert_eq!(
            c,
            [
                "/opt/j17",
                "/usr/lib/jvm/java-17-openjdk-amd64",
                "/usr/lib/jvm/java-17-openjdk-arm64",
                "/usr/lib/jvm/java-17-openjdk-arm64",
                "/usr/lib/jvm/jdk-17.0.2",
            ]
        );
    }

    #[test]
    fn only_a_17_counts() {
        assert!(is_java17("openjdk version \"17.0.15\" 2025-04-15"));
        assert!(is_java17("openjdk version \"17\" 2021-09-14"));
        assert!(!is_java17("openjdk version \"170.1\""));
        assert!(!is_java17("openjdk version \"25\" 2025-09-16"));
        assert!(!is_java17("openjdk version \"11.0.17\""));
    }

    #[test]
    fn the_pom_lists_each_dependency() {
        let pom = render_pom("kafka", &["org.apache.kafka:kafka_2.13:3.9.2".into(), "a:b:1".into()]);
        assert!(pom.contains("<artifactId>kafka</artifactId><version>0</version><packaging>pom</packaging>"));
        assert!(pom.contains(
            "<dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>3.9.2</version></dependency>"
        ));
        assert!(pom.contains("<groupId>a</groupId><artifactId>b</artifactId><version>1</version>"));
        assert!(pom.starts_with("<project xmlns=\"http://maven.apache.org/POM/4.0.0\">"));
    }

    #[test]
    fn sizes_read_like_du() {
        assert_eq!(human_size(512), "512");
        assert_eq!(human_size(67 * 1024 * 1024), "67M");
        assert_eq!(human_size(5 * 1024 * 1024 + 1), "5.1M");
        assert_eq!(human_size(1024), "1.0K");
    }
}
