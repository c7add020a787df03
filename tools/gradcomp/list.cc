// gradcomp list [--json]: every codec, its traits, parameters and examples, and the
// memory wrappers.
#include <iostream>
#include <memory>

#include "bench/catalog.h"
#include "commands.h"
#include "gradcomp/registry.h"

namespace gradcomp::cli {

void add_list_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* list = app.add_subcommand(
      "list", "List every codec: wire id, traits, parameters with defaults and ranges, examples");
  list->add_flag("--json", *json, "One JSON object per line (codecs, then wrappers)");
  list->callback([json] {
    const CodecRegistry& registry = builtin_registry();
    std::cout << (*json ? bench::describe_codecs_json(registry)
                        : bench::describe_codecs_text(registry))
              << std::flush;
  });
}

}  // namespace gradcomp::cli
