# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_cordon_global_optspecs
    string join \n p/profile= ro= rx= rw= rwx= deny= net= allow-host= add-host= env= user= group= timeout= best-effort no-view keep-scratch report status-file= status-fd= max-output= v/verbose q/quiet h/help V/version
end

function __fish_cordon_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_cordon_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_cordon_using_subcommand
    set -l cmd (__fish_cordon_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c cordon -n "__fish_cordon_needs_command" -s p -l profile -d 'Load a profile or policy file (repeatable; default: the built-in `default`)' -r
complete -c cordon -n "__fish_cordon_needs_command" -l ro -d 'Grant read access to PATH (a trailing ? skips it when missing)' -r
complete -c cordon -n "__fish_cordon_needs_command" -l rx -d 'Grant read and execute access to PATH' -r
complete -c cordon -n "__fish_cordon_needs_command" -l rw -d 'Grant read and write access to PATH (create, remove, rename, truncate)' -r
complete -c cordon -n "__fish_cordon_needs_command" -l rwx -d 'Grant read, write and execute access to PATH' -r
complete -c cordon -n "__fish_cordon_needs_command" -l deny -d 'Deny all access beneath PATH, even inside a granted tree' -r
complete -c cordon -n "__fish_cordon_needs_command" -l net -d 'Network mode: none (loopback only), egress (allowlisted hosts through a proxy), host' -r -f -a "none\t''
egress\t''
host\t''"
complete -c cordon -n "__fish_cordon_needs_command" -l allow-host -d 'Allow egress to HOST[:PORT] (implies --net egress)' -r
complete -c cordon -n "__fish_cordon_needs_command" -l add-host -d 'Pin NAME to IP for the egress proxy' -r
complete -c cordon -n "__fish_cordon_needs_command" -l env -d 'Pass host variable NAME through, or set NAME to VALUE' -r
complete -c cordon -n "__fish_cordon_needs_command" -l user -d 'When started as root: the user the command runs as' -r
complete -c cordon -n "__fish_cordon_needs_command" -l group -d 'When started as root: the group the command runs as' -r
complete -c cordon -n "__fish_cordon_needs_command" -l timeout -d 'Kill the command after DURATION (e.g. 30s, 10m); exit status 124' -r
complete -c cordon -n "__fish_cordon_needs_command" -l status-file -d 'At exit, write one JSON object describing how the run ended to PATH' -r -F
complete -c cordon -n "__fish_cordon_needs_command" -l status-fd -d 'At exit, write the status JSON object to descriptor N' -r
complete -c cordon -n "__fish_cordon_needs_command" -l max-output -d 'Cap stdout and stderr together at BYTES (e.g. 1MiB); past it, cut with a marker and end the command' -r
complete -c cordon -n "__fish_cordon_needs_command" -l best-effort -d 'Run even where the kernel cannot enforce every rule, warning for each one'
complete -c cordon -n "__fish_cordon_needs_command" -l no-view -d 'Skip the mount-namespace view: Landlock only, the lowest launch cost'
complete -c cordon -n "__fish_cordon_needs_command" -l keep-scratch -d 'Keep the private HOME/TMPDIR after exit and print where it is'
complete -c cordon -n "__fish_cordon_needs_command" -l report -d 'At exit, print what was refused'
complete -c cordon -n "__fish_cordon_needs_command" -s v -l verbose -d 'Print more about what cordon does, on stderr'
complete -c cordon -n "__fish_cordon_needs_command" -s q -l quiet -d 'Print only errors'
complete -c cordon -n "__fish_cordon_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c cordon -n "__fish_cordon_needs_command" -s V -l version -d 'Print version'
complete -c cordon -n "__fish_cordon_needs_command" -a "run" -d 'Run COMMAND in the sandbox (the default when no subcommand is given)'
complete -c cordon -n "__fish_cordon_needs_command" -a "explain" -d 'Print the resolved plan for COMMAND and run nothing'
complete -c cordon -n "__fish_cordon_needs_command" -a "probe" -d 'Report what this kernel and machine can enforce'
complete -c cordon -n "__fish_cordon_needs_command" -a "profiles" -d 'List the known profiles or show one'
complete -c cordon -n "__fish_cordon_needs_command" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cordon -n "__fish_cordon_using_subcommand run" -s p -l profile -d 'Load a profile or policy file (repeatable; default: the built-in `default`)' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l ro -d 'Grant read access to PATH (a trailing ? skips it when missing)' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l rx -d 'Grant read and execute access to PATH' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l rw -d 'Grant read and write access to PATH (create, remove, rename, truncate)' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l rwx -d 'Grant read, write and execute access to PATH' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l deny -d 'Deny all access beneath PATH, even inside a granted tree' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l net -d 'Network mode: none (loopback only), egress (allowlisted hosts through a proxy), host' -r -f -a "none\t''
egress\t''
host\t''"
complete -c cordon -n "__fish_cordon_using_subcommand run" -l allow-host -d 'Allow egress to HOST[:PORT] (implies --net egress)' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l add-host -d 'Pin NAME to IP for the egress proxy' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l env -d 'Pass host variable NAME through, or set NAME to VALUE' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l user -d 'When started as root: the user the command runs as' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l group -d 'When started as root: the group the command runs as' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l timeout -d 'Kill the command after DURATION (e.g. 30s, 10m); exit status 124' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l status-file -d 'At exit, write one JSON object describing how the run ended to PATH' -r -F
complete -c cordon -n "__fish_cordon_using_subcommand run" -l status-fd -d 'At exit, write the status JSON object to descriptor N' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l max-output -d 'Cap stdout and stderr together at BYTES (e.g. 1MiB); past it, cut with a marker and end the command' -r
complete -c cordon -n "__fish_cordon_using_subcommand run" -l best-effort -d 'Run even where the kernel cannot enforce every rule, warning for each one'
complete -c cordon -n "__fish_cordon_using_subcommand run" -l no-view -d 'Skip the mount-namespace view: Landlock only, the lowest launch cost'
complete -c cordon -n "__fish_cordon_using_subcommand run" -l keep-scratch -d 'Keep the private HOME/TMPDIR after exit and print where it is'
complete -c cordon -n "__fish_cordon_using_subcommand run" -l report -d 'At exit, print what was refused'
complete -c cordon -n "__fish_cordon_using_subcommand run" -s v -l verbose -d 'Print more about what cordon does, on stderr'
complete -c cordon -n "__fish_cordon_using_subcommand run" -s q -l quiet -d 'Print only errors'
complete -c cordon -n "__fish_cordon_using_subcommand run" -s h -l help -d 'Print help'
complete -c cordon -n "__fish_cordon_using_subcommand explain" -s p -l profile -d 'Load a profile or policy file (repeatable; default: the built-in `default`)' -r
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l ro -d 'Grant read access to PATH (a trailing ? skips it when missing)' -r
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l rx -d 'Grant read and execute access to PATH' -r
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l rw -d 'Grant read and write access to PATH (create, remove, rename, truncate)' -r
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l rwx -d 'Grant read, write and execute access to PATH' -r
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l deny -d 'Deny all access beneath PATH, even inside a granted tree' -r
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l net -d 'Network mode: none (loopback only), egress (allowlisted hosts through a proxy), host' -r -f -a "none\t''
egress\t''
host\t''"
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l allow-host -d 'Allow egress to HOST[:PORT] (implies --net egress)' -r
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l add-host -d 'Pin NAME to IP for the egress proxy' -r
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l env -d 'Pass host variable NAME through, or set NAME to VALUE' -r
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l user -d 'When started as root: the user the command runs as' -r
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l group -d 'When started as root: the group the command runs as' -r
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l timeout -d 'Kill the command after DURATION (e.g. 30s, 10m); exit status 124' -r
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l why -d 'Say which rule decides access to PATH, the access it gets and the layer enforcing it' -r -F
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l best-effort -d 'Run even where the kernel cannot enforce every rule, warning for each one'
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l no-view -d 'Skip the mount-namespace view: Landlock only, the lowest launch cost'
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l json -d 'Print the plan as JSON (stable keys; variable values are never shown)'
complete -c cordon -n "__fish_cordon_using_subcommand explain" -l check -d 'Exit 1 when any rule would be degraded (for CI gating)'
complete -c cordon -n "__fish_cordon_using_subcommand explain" -s h -l help -d 'Print help'
complete -c cordon -n "__fish_cordon_using_subcommand probe" -l json -d 'Print the findings as JSON'
complete -c cordon -n "__fish_cordon_using_subcommand probe" -s h -l help -d 'Print help'
complete -c cordon -n "__fish_cordon_using_subcommand profiles; and not __fish_seen_subcommand_from list show help" -s h -l help -d 'Print help'
complete -c cordon -n "__fish_cordon_using_subcommand profiles; and not __fish_seen_subcommand_from list show help" -f -a "list" -d 'List the built-in and installed profiles with a one-line description'
complete -c cordon -n "__fish_cordon_using_subcommand profiles; and not __fish_seen_subcommand_from list show help" -f -a "show" -d 'Print a profile\'s TOML as shipped'
complete -c cordon -n "__fish_cordon_using_subcommand profiles; and not __fish_seen_subcommand_from list show help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cordon -n "__fish_cordon_using_subcommand profiles; and __fish_seen_subcommand_from list" -l names -d 'Print only the names, one per line (for shell completion)'
complete -c cordon -n "__fish_cordon_using_subcommand profiles; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c cordon -n "__fish_cordon_using_subcommand profiles; and __fish_seen_subcommand_from show" -l resolved -d 'Print the merged policy after `extends` instead of the file as written'
complete -c cordon -n "__fish_cordon_using_subcommand profiles; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c cordon -n "__fish_cordon_using_subcommand profiles; and __fish_seen_subcommand_from help" -f -a "list" -d 'List the built-in and installed profiles with a one-line description'
complete -c cordon -n "__fish_cordon_using_subcommand profiles; and __fish_seen_subcommand_from help" -f -a "show" -d 'Print a profile\'s TOML as shipped'
complete -c cordon -n "__fish_cordon_using_subcommand profiles; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cordon -n "__fish_cordon_using_subcommand help; and not __fish_seen_subcommand_from run explain probe profiles help" -f -a "run" -d 'Run COMMAND in the sandbox (the default when no subcommand is given)'
complete -c cordon -n "__fish_cordon_using_subcommand help; and not __fish_seen_subcommand_from run explain probe profiles help" -f -a "explain" -d 'Print the resolved plan for COMMAND and run nothing'
complete -c cordon -n "__fish_cordon_using_subcommand help; and not __fish_seen_subcommand_from run explain probe profiles help" -f -a "probe" -d 'Report what this kernel and machine can enforce'
complete -c cordon -n "__fish_cordon_using_subcommand help; and not __fish_seen_subcommand_from run explain probe profiles help" -f -a "profiles" -d 'List the known profiles or show one'
complete -c cordon -n "__fish_cordon_using_subcommand help; and not __fish_seen_subcommand_from run explain probe profiles help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c cordon -n "__fish_cordon_using_subcommand help; and __fish_seen_subcommand_from profiles" -f -a "list" -d 'List the built-in and installed profiles with a one-line description'
complete -c cordon -n "__fish_cordon_using_subcommand help; and __fish_seen_subcommand_from profiles" -f -a "show" -d 'Print a profile\'s TOML as shipped'
complete -c cordon -s p -l profile -f -a '(cordon profiles list --names 2>/dev/null)' -d 'profile'
