// gradcomp list [--json]: every codec, its traits, parameters and examples, the
// memory wrappers, the named memories (dgc) and the reducer schemes of gradcomp_dist
// (their torch-free descriptions).
#include <iostream>
#include <memory>

#include "bench/catalog.h"
#include "commands.h"
#include "gradcomp/dist/schemes.h"
#include "gradcomp/registry.h"

namespace gradcomp::cli {

void add_list_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* list = app.add_subcommand(
      "list", "List every codec: wire id, traits, parameters with defaults and ranges, examples");
  list->add_flag("--json", *json, "One JSON object per line (codecs, wrappers, memories, schemes)");
  list->callback([json] {
    const CodecRegistry& registry = builtin_registry();
    std::vector<bench::SchemeDoc> schemes;
    for (const SchemeDescription* s : registry.schemes()) {
      schemes.push_back({s->name, s->summary, canonical_scheme_spec(*s, parse_spec(s->name)),
                         s->params, s->examples});
    }
    std::cout << (*json ? bench::describe_codecs_json(registry, schemes)
                        : bench::describe_codecs_text(registry, schemes))
              << std::flush;
  });
}

}  // namespace gradcomp::cli
