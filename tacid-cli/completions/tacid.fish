# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_tacid_global_optspecs
    string join \n bus= h/help V/version
end

function __fish_tacid_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_tacid_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_tacid_using_subcommand
    set -l cmd (__fish_tacid_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c tacid -n "__fish_tacid_needs_command" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tacid -n "__fish_tacid_needs_command" -s V -l version -d 'Print version'
complete -c tacid -n "__fish_tacid_needs_command" -f -a "data" -d 'The data leg: snapshots and restores of /persist, /var/log and /home'
complete -c tacid -n "__fish_tacid_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "list" -d 'List snapshots, newest first: what each is of, when, why, who asked, whether a staged restore names it, the targets holding a copy of it, and whether it is open for you (and where). Anybody may list'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "snapshot" -d 'Take a snapshot of each subvolume named (default: /persist, /var/log and /home), together as one set. Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "restore" -d 'Say what restoring a snapshot, or a set of snapshots together, would cost, and change nothing (exit code 3); with --yes, stage it for the next boot. Root and the approver group only may stage'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "status" -d 'The staged restore, what the last boot did with one, and the keeper\'s health'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "cancel" -d 'Withdraw the staged restore (a set\'s, every member). Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "delete" -d 'Delete a snapshot now; the journal records who asked. Refused while the staged restore names it, it is marked to keep, or it is the last common parent with a copy target (without --next-copy-full). Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "keep" -d 'Mark a snapshot to keep: no retention rule deletes it. --unkeep takes the mark off. Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "copy" -d 'Copy a snapshot off the disk to a target root configured (another Btrfs disk, or a backup host over SSH), incremental and verified; without NAME, what a target\'s timer runs: the newest snapshot of each subvolume the target lacks, then the target\'s retention. Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "copies" -d 'List the copies a target holds, oldest first, and which of them the local store still has. Anybody may list'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "fetch" -d 'Bring a copy back from a target into the local store (read-only, verified, named as tacid names it), after which `tacid data restore NAME` works as for any snapshot. Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "open" -d 'Open a snapshot read-only for you and print where: your own home as it was, or (root and the approver group) the whole snapshot. Files keep yesterday\'s owners and modes; nothing is restored: copy what you need out of it'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "close" -d 'Close a snapshot you opened. Not while a program of yours still uses it (a shell sitting in it, a file open there): it then says which (exit code 13)'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "diff" -d 'What changed since a snapshot in your home (or below PATH), path by path and counted: find the file before you open anything. Changes nothing'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "prune" -d 'Apply the retention policy: each deletion is journalled with the rule that chose it. With --dry-run (anybody may), say what would go and why, rule by rule, and delete nothing. For real: root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and not __fish_seen_subcommand_from list snapshot restore status cancel delete keep copy copies fetch open close diff prune help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from list" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from list" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from snapshot" -l reason -d 'Why, in one line; every user of the machine can read it in `tacid data list`' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from snapshot" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from snapshot" -l pre-switch -d 'Mark the set as taken before a switch of configuration (used by the NixOS module)'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from snapshot" -l timeline -d 'Take the timeline\'s set (used by tacid-timeline.timer): the default set, kept by the hourly/daily/weekly/monthly counts; below the free-space floor, prune first'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from snapshot" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from snapshot" -s h -l help -d 'Print help'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from restore" -l only -d 'Of a set, put back only these members, by mount point or subvolume, separated by commas (/persist,/var/log); the others stay as they are, and the words say so' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from restore" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from restore" -l set -d 'Put back the whole set the snapshot NAME belongs to, every member together at one reboot, not NAME alone'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from restore" -l yes -d 'Stage the restore after showing what it costs. Nothing is put back until the next reboot; `tacid data cancel` withdraws it until then (a set\'s, all of it)'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from restore" -l details -d 'Also list the paths changed since the snapshot (of a set, since each member): what the restore deletes (added), puts back (modified) or brings back (removed), one per line, escaped (a backslash is \\\\, any other byte not shown as itself is \\xHH). Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from restore" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from restore" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from status" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from status" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from status" -s h -l help -d 'Print help'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from cancel" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from cancel" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from cancel" -s h -l help -d 'Print help'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from delete" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from delete" -l next-copy-full -d 'Delete it even when it is the last common parent with a copy target: the next copy to that target is then sent full (all of the subvolume, not what changed)'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from delete" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from delete" -s h -l help -d 'Print help'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from keep" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from keep" -l unkeep -d 'Take the mark off: the retention rules apply to it again'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from keep" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from keep" -s h -l help -d 'Print help'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from copy" -l to -d 'The target, by the name root gave it in /etc/tacid/copies.json' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from copy" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from copy" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from copy" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from copies" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from copies" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from copies" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from fetch" -l from -d 'The target, by the name root gave it in /etc/tacid/copies.json' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from fetch" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from fetch" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from fetch" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from open" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from open" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from open" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from close" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from close" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from close" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from diff" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from diff" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from diff" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from prune" -l bus -d 'Talk to the keeper on this bus instead of the system bus (tests)' -r
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from prune" -l dry-run -d 'Delete nothing; say what would go and which rule chose it'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from prune" -l json -d 'Print JSON for programs instead of sentences for people'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from prune" -s h -l help -d 'Print help'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "list" -d 'List snapshots, newest first: what each is of, when, why, who asked, whether a staged restore names it, the targets holding a copy of it, and whether it is open for you (and where). Anybody may list'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "snapshot" -d 'Take a snapshot of each subvolume named (default: /persist, /var/log and /home), together as one set. Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "restore" -d 'Say what restoring a snapshot, or a set of snapshots together, would cost, and change nothing (exit code 3); with --yes, stage it for the next boot. Root and the approver group only may stage'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "status" -d 'The staged restore, what the last boot did with one, and the keeper\'s health'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "cancel" -d 'Withdraw the staged restore (a set\'s, every member). Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "delete" -d 'Delete a snapshot now; the journal records who asked. Refused while the staged restore names it, it is marked to keep, or it is the last common parent with a copy target (without --next-copy-full). Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "keep" -d 'Mark a snapshot to keep: no retention rule deletes it. --unkeep takes the mark off. Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "copy" -d 'Copy a snapshot off the disk to a target root configured (another Btrfs disk, or a backup host over SSH), incremental and verified; without NAME, what a target\'s timer runs: the newest snapshot of each subvolume the target lacks, then the target\'s retention. Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "copies" -d 'List the copies a target holds, oldest first, and which of them the local store still has. Anybody may list'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "fetch" -d 'Bring a copy back from a target into the local store (read-only, verified, named as tacid names it), after which `tacid data restore NAME` works as for any snapshot. Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "open" -d 'Open a snapshot read-only for you and print where: your own home as it was, or (root and the approver group) the whole snapshot. Files keep yesterday\'s owners and modes; nothing is restored: copy what you need out of it'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "close" -d 'Close a snapshot you opened. Not while a program of yours still uses it (a shell sitting in it, a file open there): it then says which (exit code 13)'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "diff" -d 'What changed since a snapshot in your home (or below PATH), path by path and counted: find the file before you open anything. Changes nothing'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "prune" -d 'Apply the retention policy: each deletion is journalled with the rule that chose it. With --dry-run (anybody may), say what would go and why, rule by rule, and delete nothing. For real: root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand data; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tacid -n "__fish_tacid_using_subcommand help; and not __fish_seen_subcommand_from data help" -f -a "data" -d 'The data leg: snapshots and restores of /persist, /var/log and /home'
complete -c tacid -n "__fish_tacid_using_subcommand help; and not __fish_seen_subcommand_from data help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "list" -d 'List snapshots, newest first: what each is of, when, why, who asked, whether a staged restore names it, the targets holding a copy of it, and whether it is open for you (and where). Anybody may list'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "snapshot" -d 'Take a snapshot of each subvolume named (default: /persist, /var/log and /home), together as one set. Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "restore" -d 'Say what restoring a snapshot, or a set of snapshots together, would cost, and change nothing (exit code 3); with --yes, stage it for the next boot. Root and the approver group only may stage'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "status" -d 'The staged restore, what the last boot did with one, and the keeper\'s health'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "cancel" -d 'Withdraw the staged restore (a set\'s, every member). Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "delete" -d 'Delete a snapshot now; the journal records who asked. Refused while the staged restore names it, it is marked to keep, or it is the last common parent with a copy target (without --next-copy-full). Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "keep" -d 'Mark a snapshot to keep: no retention rule deletes it. --unkeep takes the mark off. Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "copy" -d 'Copy a snapshot off the disk to a target root configured (another Btrfs disk, or a backup host over SSH), incremental and verified; without NAME, what a target\'s timer runs: the newest snapshot of each subvolume the target lacks, then the target\'s retention. Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "copies" -d 'List the copies a target holds, oldest first, and which of them the local store still has. Anybody may list'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "fetch" -d 'Bring a copy back from a target into the local store (read-only, verified, named as tacid names it), after which `tacid data restore NAME` works as for any snapshot. Root and the approver group only'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "open" -d 'Open a snapshot read-only for you and print where: your own home as it was, or (root and the approver group) the whole snapshot. Files keep yesterday\'s owners and modes; nothing is restored: copy what you need out of it'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "close" -d 'Close a snapshot you opened. Not while a program of yours still uses it (a shell sitting in it, a file open there): it then says which (exit code 13)'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "diff" -d 'What changed since a snapshot in your home (or below PATH), path by path and counted: find the file before you open anything. Changes nothing'
complete -c tacid -n "__fish_tacid_using_subcommand help; and __fish_seen_subcommand_from data" -f -a "prune" -d 'Apply the retention policy: each deletion is journalled with the rule that chose it. With --dry-run (anybody may), say what would go and why, rule by rule, and delete nothing. For real: root and the approver group only'
