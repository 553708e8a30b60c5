/* kt-sandbox: the agent's socket, store and lock (see agent-dir.c). */
#ifndef KT_SANDBOX_AGENT_DIR_H
#define KT_SANDBOX_AGENT_DIR_H
void agent_dir(const char *dir, long uid, long gid);
#endif
