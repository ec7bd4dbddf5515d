#include "tool_main.h"

#include "cli.h"

namespace mq::cli {

int RunTool(int argc, char** argv, const Tool& tool) {
  SetProgramName(tool.name);
  HoldStandardDescriptors();
  IgnoreSigpipe();
  CLI::App app;  // its options stay valid while the tool runs
  if (tool.parse) {
    if (int rc = tool.parse(argc, argv); rc >= 0) return rc;
  } else {
    app.name(tool.name);
    if (tool.usage != nullptr) UseUsage(app, tool.usage);
    AddVersionFlag(app);
    if (tool.flags) tool.flags(app);
    if (int rc = Parse(app, argc, argv); rc >= 0) return rc;
  }
  return RunGuarded(tool.run);
}

}  // namespace mq::cli
