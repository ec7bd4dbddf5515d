// Reaching other hosts (format-spec/protocol.md): a replica root or the
// cluster state at `host:path` is served by an mq tool started there
// through $MQ_RSH (default "ssh"), speaking the wire protocol on its
// standard input and output.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mq/cluster.h"
#include "mq/status.h"
#include "mq/wire.h"
#include "shell_quote.h"

namespace mq::cli {

// RshCommand and ShellQuote: shell_quote.h.

// An mq program on another host: $MQ_REMOTE_BINDIR/NAME when that is set,
// else NAME (found in the remote PATH).
std::string RemoteProgram(std::string_view name);
// The wire timeout: $MQ_TIMEOUT_MS, else the protocol's default (R52).
int WireTimeoutMs();

// Runs `remote_argv` on `host` and waits for it (its output is ours): OK
// when it exits 0.
Status RunRemote(std::string_view host, const std::vector<std::string>& remote_argv);

// A client of `mq-replicate --serve -C PATH` on the address's host. With
// `connect_once`, its connection is made at most once: after one that
// failed or dropped, each call fails at once (unavailable) rather than
// starting a server there again (a short run that asks a host many
// questions contacts one that is down once).
std::shared_ptr<wire::Client> ReplicaClient(const Address& address, bool connect_once = false);
// A client of `mq-isr --cluster PATH --serve` on the address's host.
std::shared_ptr<wire::Client> ControllerClient(const Address& address);

// The cluster state at `spec`: a cluster directory on this host (the
// authority itself), or `host:path` reached through ControllerClient.
Result<std::unique_ptr<ClusterStore>> OpenClusterStore(const std::string& spec);

}  // namespace mq::cli
