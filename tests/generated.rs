//! The man page and shell completions are generated from the clap definition and checked
//! in. This test fails when they drift; run it with `CORDON_REGENERATE=1` to rewrite them.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The man page: clap's sections, then the hand-written ones from `man/sections.roff`.
fn man_page() -> Vec<u8> {
    let man = clap_mangen::Man::new(cordon::cli::command())
        .section("1")
        .manual("cordon manual")
        .source(format!("cordon {}", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    man.render_title(&mut out).unwrap();
    man.render_name_section(&mut out).unwrap();
    man.render_synopsis_section(&mut out).unwrap();
    man.render_description_section(&mut out).unwrap();
    man.render_options_section(&mut out).unwrap();
    man.render_subcommands_section(&mut out).unwrap();
    out.extend(std::fs::read(root().join("man/sections.roff")).unwrap());
    man.render_version_section(&mut out).unwrap();
    out
}

fn completion(shell: clap_complete::Shell) -> Vec<u8> {
    let mut cmd = cordon::cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "cordon", &mut out);
    out
}

fn check(path: &Path, expected: Vec<u8>) {
    if std::env::var_os("CORDON_REGENERATE").is_some() {
        std::fs::write(path, &expected).unwrap();
        return;
    }
    let actual = std::fs::read(path).unwrap_or_default();
    assert!(
        actual == expected,
        "{} is out of date with the clap definition; run `CORDON_REGENERATE=1 cargo test --test generated` and commit the result",
        path.display()
    );
}

#[test]
fn man_page_is_current() {
    check(&root().join("man/cordon.1"), man_page());
}

#[test]
fn completions_are_current() {
    use clap_complete::Shell;
    check(
        &root().join("completions/cordon.bash"),
        completion(Shell::Bash),
    );
    check(&root().join("completions/_cordon"), completion(Shell::Zsh));
    check(
        &root().join("completions/cordon.fish"),
        completion(Shell::Fish),
    );
}

#[test]
fn man_page_has_the_sections_users_look_for() {
    let text = String::from_utf8(man_page()).unwrap();
    for section in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "POLICY FORMAT",
        "PROFILES",
        "EXIT STATUS",
        "ENVIRONMENT",
        "FILES",
        "EXAMPLES",
        "SECURITY",
        "SEE ALSO",
    ] {
        assert!(
            text.contains(&format!(".SH \"{section}\""))
                || text.contains(&format!(".SH {section}")),
            "missing section {section}"
        );
    }
}
