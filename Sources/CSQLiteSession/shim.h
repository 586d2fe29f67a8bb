// SQLite's session extension (https://sqlite.org/sessionintro.html), which Debian's and Ubuntu's
// libsqlite3 build in (SQLITE_ENABLE_SESSION): changesets replicate a write to the other daemons
// of a cluster. Declared here, not through <sqlite3.h>, whose declarations of it are behind that
// macro, and so that this module adds no second copy of the rest of SQLite's API to Swift.
#ifndef DEPOT_SQLITE_SESSION_SHIM_H
#define DEPOT_SQLITE_SESSION_SHIM_H

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_session sqlite3_session;
typedef struct sqlite3_changeset_iter sqlite3_changeset_iter;

int sqlite3session_create(sqlite3 *db, const char *zDb, sqlite3_session **ppSession);
void sqlite3session_delete(sqlite3_session *pSession);
void sqlite3session_table_filter(
    sqlite3_session *pSession, int (*xFilter)(void *pCtx, const char *zTab), void *pCtx);
int sqlite3session_attach(sqlite3_session *pSession, const char *zTab);
int sqlite3session_changeset(sqlite3_session *pSession, int *pnChangeset, void **ppChangeset);
int sqlite3changeset_apply(
    sqlite3 *db, int nChangeset, void *pChangeset, int (*xFilter)(void *pCtx, const char *zTab),
    int (*xConflict)(void *pCtx, int eConflict, sqlite3_changeset_iter *p), void *pCtx);
int sqlite3changeset_start(sqlite3_changeset_iter **pp, int nChangeset, void *pChangeset);
int sqlite3changeset_next(sqlite3_changeset_iter *pIter);
int sqlite3changeset_op(
    sqlite3_changeset_iter *pIter, const char **pzTab, int *pnCol, int *pOp, int *pbIndirect);
int sqlite3changeset_pk(sqlite3_changeset_iter *pIter, unsigned char **pabPK, int *pnCol);
int sqlite3changeset_old(sqlite3_changeset_iter *pIter, int iVal, struct sqlite3_value **ppValue);
int sqlite3changeset_new(sqlite3_changeset_iter *pIter, int iVal, struct sqlite3_value **ppValue);
int sqlite3changeset_finalize(sqlite3_changeset_iter *pIter);
long long sqlite3_value_int64(struct sqlite3_value *pValue);
double sqlite3_value_double(struct sqlite3_value *pValue);
int sqlite3_value_type(struct sqlite3_value *pValue);
int sqlite3_value_bytes(struct sqlite3_value *pValue);
const unsigned char *sqlite3_value_text(struct sqlite3_value *pValue);
const void *sqlite3_value_blob(struct sqlite3_value *pValue);
void sqlite3_free(void *p);
const char *sqlite3_errmsg(sqlite3 *db);

#endif
