/* pickle_ops.c — names of the pickle opcodes, for error messages. */
#include "pickle/pickle_ops_i.h"

#include <stddef.h>

const char *pk_op_name(unsigned op) {
    switch (op) {
    case PK_OP_MARK: return "MARK";
    case PK_OP_STOP: return "STOP";
    case PK_OP_POP: return "POP";
    case PK_OP_POP_MARK: return "POP_MARK";
    case PK_OP_DUP: return "DUP";
    case PK_OP_BINBYTES: return "BINBYTES";
    case PK_OP_SHORT_BINBYTES: return "SHORT_BINBYTES";
    case PK_OP_FLOAT: return "FLOAT";
    case PK_OP_BINFLOAT: return "BINFLOAT";
    case PK_OP_INT: return "INT";
    case PK_OP_BININT: return "BININT";
    case PK_OP_BININT1: return "BININT1";
    case PK_OP_LONG: return "LONG";
    case PK_OP_BININT2: return "BININT2";
    case PK_OP_NONE: return "NONE";
    case PK_OP_PERSID: return "PERSID";
    case PK_OP_BINPERSID: return "BINPERSID";
    case PK_OP_REDUCE: return "REDUCE";
    case PK_OP_STRING: return "STRING";
    case PK_OP_BINSTRING: return "BINSTRING";
    case PK_OP_SHORT_BINSTRING: return "SHORT_BINSTRING";
    case PK_OP_UNICODE: return "UNICODE";
    case PK_OP_BINUNICODE: return "BINUNICODE";
    case PK_OP_EMPTY_LIST: return "EMPTY_LIST";
    case PK_OP_APPEND: return "APPEND";
    case PK_OP_BUILD: return "BUILD";
    case PK_OP_GLOBAL: return "GLOBAL";
    case PK_OP_DICT: return "DICT";
    case PK_OP_APPENDS: return "APPENDS";
    case PK_OP_GET: return "GET";
    case PK_OP_BINGET: return "BINGET";
    case PK_OP_INST: return "INST";
    case PK_OP_LONG_BINGET: return "LONG_BINGET";
    case PK_OP_LIST: return "LIST";
    case PK_OP_OBJ: return "OBJ";
    case PK_OP_PUT: return "PUT";
    case PK_OP_BINPUT: return "BINPUT";
    case PK_OP_LONG_BINPUT: return "LONG_BINPUT";
    case PK_OP_SETITEM: return "SETITEM";
    case PK_OP_TUPLE: return "TUPLE";
    case PK_OP_SETITEMS: return "SETITEMS";
    case PK_OP_EMPTY_DICT: return "EMPTY_DICT";
    case PK_OP_EMPTY_TUPLE: return "EMPTY_TUPLE";
    case PK_OP_PROTO: return "PROTO";
    case PK_OP_NEWOBJ: return "NEWOBJ";
    case PK_OP_EXT1: return "EXT1";
    case PK_OP_EXT2: return "EXT2";
    case PK_OP_EXT4: return "EXT4";
    case PK_OP_TUPLE1: return "TUPLE1";
    case PK_OP_TUPLE2: return "TUPLE2";
    case PK_OP_TUPLE3: return "TUPLE3";
    case PK_OP_NEWTRUE: return "NEWTRUE";
    case PK_OP_NEWFALSE: return "NEWFALSE";
    case PK_OP_LONG1: return "LONG1";
    case PK_OP_LONG4: return "LONG4";
    case PK_OP_SHORT_BINUNICODE: return "SHORT_BINUNICODE";
    case PK_OP_BINUNICODE8: return "BINUNICODE8";
    case PK_OP_BINBYTES8: return "BINBYTES8";
    case PK_OP_EMPTY_SET: return "EMPTY_SET";
    case PK_OP_ADDITEMS: return "ADDITEMS";
    case PK_OP_FROZENSET: return "FROZENSET";
    case PK_OP_NEWOBJ_EX: return "NEWOBJ_EX";
    case PK_OP_STACK_GLOBAL: return "STACK_GLOBAL";
    case PK_OP_MEMOIZE: return "MEMOIZE";
    case PK_OP_FRAME: return "FRAME";
    case PK_OP_BYTEARRAY8: return "BYTEARRAY8";
    case PK_OP_NEXT_BUFFER: return "NEXT_BUFFER";
    case PK_OP_READONLY_BUFFER: return "READONLY_BUFFER";
    }
    return NULL;
}
