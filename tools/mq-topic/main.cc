// mq-topic: list, describe, create, configure, grow and delete the topics
// of a data directory (kafka-topics and kafka-configs in mq's terms; the
// decisions are liblog's, mq/topic_admin.h). Manual: man/man1/mq-topic.1.
#include "tool_main.h"
#include "topic.h"

int main(int argc, char** argv) {
  mq::topic::Options o;
  return mq::cli::RunTool(argc, argv,
                          {.name = "mq-topic",
                           .usage = mq::topic::kUsage,
                           .flags = [&](CLI::App& app) { mq::topic::AddFlags(app, &o); },
                           .run = [&] { return mq::topic::Run(o); }});
}
