// mq-isr: the cluster state of replicated topics (format-spec/cluster.md):
// create topics over several log roots, describe leaders and ISRs in
// Kafka's words, check them for cron, and elect leaders.
// Manual: man/man1/mq-isr.1.
#include "cli.h"
#include "isr.h"
#include "options.h"
#include "tool_main.h"

int main(int argc, char** argv) {
  mq::isr::Options o;
  return mq::cli::RunTool(
      argc, argv,
      {.name = "mq-isr",
       .parse = [&](int n, char** args) { return mq::isr::ParseOptions(n, args, &o); },
       .run =
           [&] {
             mq::cli::Output out;
             switch (o.command) {
               case mq::isr::Command::kCreate:
                 return mq::isr::Create(o.cluster, o.create, out);
               case mq::isr::Command::kDescribe:
                 return mq::isr::Describe(o.cluster, o.describe, out);
               case mq::isr::Command::kElect:
                 return mq::isr::Elect(o.cluster, o.elect, out);
               case mq::isr::Command::kAttach:
                 return mq::isr::Attach(o.cluster, o.attach, out);
               case mq::isr::Command::kServe:
                 return mq::isr::Serve(o.cluster);
               case mq::isr::Command::kVerifyReplicas:
                 return mq::isr::VerifyReplicas(o.cluster, o.check_topic, o.verify_json, out);
               case mq::isr::Command::kCheck:
                 break;
             }
             return mq::isr::Check(o.cluster, o.check_topic, o.check_verify, out);
           }});
}
