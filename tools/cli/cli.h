/* tools/cli/cli.h: the meshlm subcommands (one file each, dispatched by main.c); what they
 * share with the server is tools/common/tool.h. */
#ifndef MESHLM_CLI_H
#define MESHLM_CLI_H

#include "common/tool.h"

int cmd_accuracy(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);

#endif
