# bash completion for hccld-ctl (installed where bash-completion looks:
# $PREFIX/share/bash-completion/completions/hccld-ctl). Class names come from the daemon.

_hccld_ctl_classes()
{
    local sock=() i
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ ${COMP_WORDS[i]} == --admin-socket ]] && sock=(--admin-socket "${COMP_WORDS[i + 1]}")
    done
    "${COMP_WORDS[0]}" "${sock[@]}" --json qos list 2>/dev/null |
        grep -o '"name":"[^"]*"' | sed 's/"name":"\(.*\)"/\1/'
}

_hccld_ctl()
{
    local cur prev words cword
    _init_completion || return

    local commands="status topology comms metrics links watch qos"
    local cmd="" sub="" i
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
        --admin-socket) ((i++)) ;;
        -*) ;;
        *)
            if [[ -z $cmd ]]; then
                cmd=${words[i]}
            elif [[ $cmd == qos && -z $sub ]]; then
                sub=${words[i]}
            fi
            ;;
        esac
    done

    case $prev in
    --admin-socket)
        _filedir sock
        return
        ;;
    --max-bw)
        COMPREPLY=($(compgen -W "none 1Gbit 10Gbit 25Gbit 40Gbit 100Gbit" -- "$cur"))
        return
        ;;
    --priority | --stall-s | --uid | --job)
        return
        ;;
    esac

    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--admin-socket --json --help --version" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$commands" -- "$cur"))
        fi
        return
    fi
    case $cmd in
    status | topology | comms | links) COMPREPLY=($(compgen -W "--json" -- "$cur")) ;;
    watch) COMPREPLY=($(compgen -W "--json --stall-s" -- "$cur")) ;;
    qos)
        case $sub in
        "") COMPREPLY=($(compgen -W "list set assign" -- "$cur")) ;;
        list) COMPREPLY=($(compgen -W "--json" -- "$cur")) ;;
        set)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--max-bw --priority" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(_hccld_ctl_classes)" -- "$cur"))
            fi
            ;;
        assign)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "--job --uid" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(_hccld_ctl_classes)" -- "$cur"))
            fi
            ;;
        esac
        ;;
    esac
} &&
    complete -F _hccld_ctl hccld-ctl
