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
    use clap_complete::Shell;
    let mut cmd = cordon::cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "cordon", &mut out);
    let text = String::from_utf8(out).unwrap();
    // clap's generators complete `-p NAME|PATH` as a file only; profile names come from
    // `cordon profiles list --names` (built-in and installed), files still complete.
    let text = match shell {
        Shell::Bash => text.replace(
            "                --profile)\n                    COMPREPLY=($(compgen -f \"${cur}\"))",
            "                --profile)\n                    COMPREPLY=($(compgen -W \"$(cordon profiles list --names 2>/dev/null)\" -- \"${cur}\") $(compgen -f -- \"${cur}\"))",
        )
        .replace(
            "                -p)\n                    COMPREPLY=($(compgen -f \"${cur}\"))",
            "                -p)\n                    COMPREPLY=($(compgen -W \"$(cordon profiles list --names 2>/dev/null)\" -- \"${cur}\") $(compgen -f -- \"${cur}\"))",
        ),
        Shell::Zsh => text.replace(":NAME|PATH:_default", ":NAME|PATH:_cordon_profiles")
            + "\n(( $+functions[_cordon_profiles] )) ||\n_cordon_profiles() {\n    _alternative 'profiles:profile:($(cordon profiles list --names 2>/dev/null))' 'files:file:_files'\n}\n",
        Shell::Fish => text
            + "complete -c cordon -s p -l profile -f -a '(cordon profiles list --names 2>/dev/null)' -d 'profile'\n",
        _ => text,
    };
    text.into_bytes()
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
fn completions_offer_profile_names() {
    use clap_complete::Shell;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let text = String::from_utf8(completion(shell)).unwrap();
        assert!(
            text.contains("cordon profiles list --names"),
            "{shell:?} completion does not offer profile names"
        );
    }
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

#[test]
fn man_page_renders_with_man() {
    let page = root().join("man/cordon.1");
    let out = match std::process::Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "80")
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("skipped: `man` is not installed here ({e})");
            return;
        }
    };
    assert!(out.status.success(), "man -l failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for section in ["NAME", "SYNOPSIS", "EXIT STATUS", "SECURITY", "SEE ALSO"] {
        assert!(text.contains(section), "rendered page lacks {section}");
    }
    assert!(
        text.contains("--no-view"),
        "rendered page lacks the options"
    );
}
